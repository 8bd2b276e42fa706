package wechatfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// oauth2 asks the OAuth2 endpoint for a token of client with the scope and
// audience given (none when empty).
func oauth2(t *testing.T, s *Server, client, secret, scope, audience string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {client}, "client_secret": {secret}}
	if scope != "" {
		form.Set("scope", scope)
	}
	if audience != "" {
		form.Set("audience", audience)
	}
	req := httptest.NewRequest(http.MethodPost, "/oauth2/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("scope %q, audience %q: HTTP %d %q", scope, audience, rec.Code, rec.Body.String())
	}
	return mustToken(t, a)
}

// TestOAuth2TokensBelongToTheirScopeAndAudience has one client ask for
// tokens with several scopes and audiences from a server that hands out a
// current token again: each grant gets a token of its own, and Grant tells
// what each was asked for.
func TestOAuth2TokensBelongToTheirScopeAndAudience(t *testing.T) {
	t.Parallel()
	s := NewHandler(Options{OAuth2: map[string]string{"c": "s"}, OAuth2Reuse: time.Minute})
	read := oauth2(t, s, "c", "s", "read", "https://a.example")
	if again := oauth2(t, s, "c", "s", "read", "https://a.example"); again != read {
		t.Fatalf("the same grant got %q, then %q; want the current token again", read, again)
	}
	grants := []struct{ scope, audience string }{{"read", "https://a.example"}, {"write", "https://a.example"}, {"read", "https://b.example"}, {"", ""}}
	seen := map[string]bool{}
	for _, g := range grants {
		tok := oauth2(t, s, "c", "s", g.scope, g.audience)
		if seen[tok] {
			t.Fatalf("scope %q, audience %q got a token another grant got", g.scope, g.audience)
		}
		seen[tok] = true
		if scope, audience, ok := s.Grant(tok); !ok || scope != g.scope || audience != g.audience {
			t.Fatalf("Grant = %q, %q, %v; want %q, %q", scope, audience, ok, g.scope, g.audience)
		}
	}
	if _, _, ok := s.Grant("nope"); ok {
		t.Fatal("Grant knows a token the server never issued")
	}
}
