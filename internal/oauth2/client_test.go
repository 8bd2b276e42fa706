package oauth2

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

const (
	testClient = "svc-reports"
	testSecret = "S3cr+t/ab&c=d<e>"
)

func newFake(t *testing.T, opts wechatfake.Options) *wechatfake.Server {
	t.Helper()
	opts.OAuth2 = map[string]string{testClient: testSecret}
	fake := wechatfake.New(opts)
	t.Cleanup(fake.Close)
	return fake
}

func mint(t *testing.T, cfg upstream.Config) (upstream.Token, error) {
	t.Helper()
	c, err := NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Mint(context.Background(), false)
}

func TestMintWithBothAuthStyles(t *testing.T) {
	t.Parallel()
	for _, style := range []string{"", upstream.AuthBasic, upstream.AuthBody} {
		t.Run("auth_style "+style, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{OAuth2Audience: "https://api.example.com", OAuth2Scopes: []string{"a", "b"}})
			cfg := upstream.Config{Provider: upstream.OAuth2, TokenURL: fake.URL() + "/oauth2/token", AppID: testClient, Secret: testSecret,
				Scope: "a b", Audience: "https://api.example.com", AuthStyle: style}
			t1, err := mint(t, cfg)
			if err != nil || t1.ExpiresIn != 7200*time.Second || !fake.Valid(t1.AccessToken) {
				t.Fatalf("Mint = %v, %v", t1, err)
			}
			t2, err := mint(t, cfg)
			if err != nil || t2.AccessToken == t1.AccessToken {
				t.Fatalf("a second Mint = %v, %v; the fake mints on every call", t2, err)
			}
		})
	}
}

func TestMintErrors(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{OAuth2Audience: "https://api.example.com", OAuth2Scopes: []string{"a"}})
	ok := upstream.Config{Provider: upstream.OAuth2, TokenURL: fake.URL() + "/oauth2/token", AppID: testClient, Secret: testSecret,
		Scope: "a", Audience: "https://api.example.com"}
	tests := []struct {
		name   string
		edit   func(*upstream.Config)
		prep   func()
		class  error
		code   string
		status int
	}{
		{"a wrong secret is invalid_client", func(c *upstream.Config) { c.Secret = "wrong-" + testSecret }, nil, upstream.ErrCredentials, "invalid_client", 401},
		{"a wrong secret in the body is invalid_client", func(c *upstream.Config) { c.Secret, c.AuthStyle = "wrong-"+testSecret, upstream.AuthBody },
			nil, upstream.ErrCredentials, "invalid_client", 401},
		{"an unknown scope is invalid_scope", func(c *upstream.Config) { c.Scope = "admin" }, nil, upstream.ErrCredentials, "invalid_scope", 400},
		{"a missing audience is invalid_request", func(c *upstream.Config) { c.Audience = "" }, nil, upstream.ErrCredentials, "invalid_request", 400},
		{"a wrong token_url is the configuration's fault", func(c *upstream.Config) { c.TokenURL = fake.URL() + "/nope" }, nil, upstream.ErrCredentials, "", 404},
		{"HTTP 429 is a quota", nil, func() { fake.FailHTTPNext(1, http.StatusTooManyRequests) }, upstream.ErrQuota, "", 429},
		{"HTTP 503 is transient", nil, func() { fake.FailHTTPNext(1, http.StatusServiceUnavailable) }, upstream.ErrUnavailable, "", 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			if tt.edit != nil {
				tt.edit(&cfg)
			}
			if tt.prep != nil {
				tt.prep()
			}
			_, err := mint(t, cfg)
			var e *upstream.Error
			if !errors.Is(err, tt.class) || !errors.As(err, &e) || e.Code != tt.code || e.HTTPStatus != tt.status {
				t.Fatalf("Mint = %v (%#v); want %v, code %q, HTTP %d", err, e, tt.class, tt.code, tt.status)
			}
			assertClean(t, err)
			if reason, meta := e.ErrorInfo(); !strings.HasPrefix(reason, "OAUTH2_") || meta["provider"] != upstream.OAuth2 {
				t.Fatalf("ErrorInfo = %q, %v", reason, meta)
			}
		})
	}
}

// assertClean fails when the secret, in any spelling, or a Basic
// credential made of it shows in err.
func assertClean(t *testing.T, err error) {
	t.Helper()
	basic := base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(testClient) + ":" + url.QueryEscape(testSecret)))
	text := fmt.Sprintf("%v %+v %#v", err, err, err)
	for _, form := range []string{testSecret, url.QueryEscape(testSecret), "S3cr", basic} {
		if strings.Contains(text, form) {
			t.Fatalf("%q shows in %s", form, text)
		}
	}
}

func TestMintOddAnswersAndTransport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		class  error
		want   time.Duration // a token's lifetime, when the answer is good
	}{
		{"a form-encoded answer is read", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-www-form-urlencoded")
			io.WriteString(w, "access_token=tok&token_type=bearer&expires_in=3600")
		}, nil, time.Hour},
		{"expires_in as a string is read", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"access_token":"tok","token_type":"Bearer","expires_in":"1800"}`)
		}, nil, 30 * time.Minute},
		{"an answer without expires_in is refused", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"access_token":"tok","token_type":"Bearer"}`)
		}, upstream.ErrUnavailable, 0},
		{"an answer without access_token is refused", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"token_type":"Bearer","expires_in":60}`)
		}, upstream.ErrUnavailable, 0},
		{"an error echoing the secret is masked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s for Basic %s"}`, testSecret, r.Header.Get("Authorization"))
		}, upstream.ErrCredentials, 0},
		{"a redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/token", http.StatusTemporaryRedirect)
		}, upstream.ErrUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				if r.Method != http.MethodPost || r.PostForm.Get("grant_type") != "client_credentials" {
					t.Errorf("request %s %v", r.Method, r.PostForm)
				}
				tt.answer(w, r)
			}))
			t.Cleanup(srv.Close)
			tok, err := mint(t, upstream.Config{Provider: upstream.OAuth2, TokenURL: srv.URL + "/token", AppID: testClient, Secret: testSecret})
			if tt.class == nil {
				if err != nil || tok.AccessToken != "tok" || tok.ExpiresIn < tt.want-time.Second || tok.ExpiresIn > tt.want {
					t.Fatalf("Mint = %v, %v; want a token for %v", tok, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.class) {
				t.Fatalf("Mint = %v, want %v", err, tt.class)
			}
			assertClean(t, err)
		})
	}
	// An endpoint nobody listens on: a transport failure, not sent.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = mint(t, upstream.Config{Provider: upstream.OAuth2, TokenURL: "http://" + addr + "/token", AppID: testClient, Secret: testSecret})
	var e *upstream.Error
	if !errors.Is(err, upstream.ErrUnavailable) || !errors.As(err, &e) || !e.Transport || e.Sent {
		t.Fatalf("Mint against nothing = %v (%#v)", err, e)
	}
	assertClean(t, err)
}
