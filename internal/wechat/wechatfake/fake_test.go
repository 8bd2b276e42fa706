package wechatfake

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/clocktest"
)

// newClock returns a manual clock for Options.Now at 10:00 in Beijing, far
// from the day's turn.
func newClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC))
}

type answer struct {
	Errcode     int    `json:"errcode"`
	Errmsg      string `json:"errmsg"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

// do sends one request to the handler and decodes its JSON answer.
func do(t *testing.T, s *Server, method, target string, body any) answer {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, target, rd))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d", method, target, rec.Code)
	}
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("%s %s: %v in %q", method, target, err, rec.Body.String())
	}
	return a
}

func classic(t *testing.T, s *Server, appid, secret string) answer {
	t.Helper()
	q := url.Values{"grant_type": {"client_credential"}, "appid": {appid}, "secret": {secret}}
	return do(t, s, http.MethodGet, "/cgi-bin/token?"+q.Encode(), nil)
}

func stable(t *testing.T, s *Server, appid, secret string, force bool) answer {
	t.Helper()
	return do(t, s, http.MethodPost, "/cgi-bin/stable_token", map[string]any{
		"grant_type": "client_credential", "appid": appid, "secret": secret, "force_refresh": force,
	})
}

func wecom(t *testing.T, s *Server, corpid, secret string) answer {
	t.Helper()
	q := url.Values{"corpid": {corpid}, "corpsecret": {secret}}
	return do(t, s, http.MethodGet, "/cgi-bin/gettoken?"+q.Encode(), nil)
}

// validity returns the validation endpoint's errcode for tok.
func validity(t *testing.T, s *Server, tok string) int {
	t.Helper()
	code := do(t, s, http.MethodGet, "/cgi-bin/get_api_domain_ip?access_token="+url.QueryEscape(tok), nil).Errcode
	if (code == 0) != s.Valid(tok) {
		t.Fatalf("Valid(%q) disagrees with errcode %d", tok, code)
	}
	return code
}

func mustToken(t *testing.T, a answer) string {
	t.Helper()
	if a.Errcode != 0 || a.AccessToken == "" || a.ExpiresIn <= 0 {
		t.Fatalf("want a token, got %+v", a)
	}
	return a.AccessToken
}

func fixture(opts Options) (*Server, *clocktest.Clock) {
	c := newClock()
	opts.Apps = map[string]string{"wxapp": "appsecret"}
	opts.Corps = map[string]string{"wwcorp": "corpsecret"}
	opts.Now = c.Now
	return NewHandler(opts), c
}

func TestClassicMintsNewTokenAndKeepsOldOneForGrace(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{})
	first := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	c.Advance(time.Hour)
	second := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	if first == second {
		t.Fatal("classic returned the same token twice")
	}
	c.Advance(5*time.Minute - time.Second)
	if code := validity(t, s, first); code != 0 {
		t.Fatalf("old token within the grace window: errcode %d", code)
	}
	c.Advance(time.Second)
	if code := validity(t, s, first); code != 40001 {
		t.Fatalf("old token after the grace window: errcode %d, want 40001", code)
	}
	if code := validity(t, s, second); code != 0 {
		t.Fatalf("new token: errcode %d", code)
	}
	c.Advance(2 * time.Hour)
	if code := validity(t, s, second); code != 42001 {
		t.Fatalf("token past expires_in: errcode %d, want 42001", code)
	}
	if got := s.Issued("wxapp"); got != 2 {
		t.Fatalf("Issued = %d, want 2", got)
	}
}

func TestClassicGraceNeverExtendsLifetime(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{})
	first := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	c.Advance(7200*time.Second - time.Minute)
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	c.Advance(time.Minute)
	if code := validity(t, s, first); code != 42001 {
		t.Fatalf("old token at its own expiry: errcode %d, want 42001", code)
	}
}

func TestStableNormalModeReturnsSameTokenUntilLastWindow(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{})
	a := stable(t, s, "wxapp", "appsecret", false)
	first := mustToken(t, a)
	if a.ExpiresIn != 7200 {
		t.Fatalf("expires_in = %d, want 7200", a.ExpiresIn)
	}
	c.Advance(time.Hour)
	b := stable(t, s, "wxapp", "appsecret", false)
	if mustToken(t, b) != first || b.ExpiresIn != 3600 {
		t.Fatalf("an hour on: got %+v, want the same token with 3600 s left", b)
	}
	c.Advance(55*time.Minute + time.Second) // 4m59s left: inside the last window
	second := mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	if second == first {
		t.Fatal("stable kept the token inside its last window")
	}
	if code := validity(t, s, first); code != 0 {
		t.Fatalf("previous stable token before its expiry: errcode %d", code)
	}
	c.Advance(5 * time.Minute)
	if code := validity(t, s, first); code != 42001 {
		t.Fatalf("previous stable token after its expiry: errcode %d, want 42001", code)
	}
	if s.Mints("wxapp") != 3 || s.Issued("wxapp") != 2 {
		t.Fatalf("Mints = %d, Issued = %d; want 3 and 2", s.Mints("wxapp"), s.Issued("wxapp"))
	}
}

func TestStableIsSeparateFromClassic(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	st := mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	if got := mustToken(t, stable(t, s, "wxapp", "appsecret", false)); got != st {
		t.Fatal("classic mints changed the stable token")
	}
}

func TestStableForceRefresh(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{ForceRefreshPerDay: 3})
	old := mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	forced := mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	if forced == old {
		t.Fatal("force_refresh returned the current token")
	}
	if code := validity(t, s, old); code != 40001 {
		t.Fatalf("token replaced by force_refresh: errcode %d, want 40001", code)
	}
	if a := stable(t, s, "wxapp", "appsecret", true); a.Errcode != 45011 {
		t.Fatalf("second force within 30 s: %+v, want errcode 45011", a)
	}
	if got := mustToken(t, stable(t, s, "wxapp", "appsecret", false)); got != forced {
		t.Fatal("normal mode after a refused force changed the token")
	}
	c.Advance(30 * time.Second)
	mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	c.Advance(30 * time.Second)
	mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	c.Advance(30 * time.Second)
	if a := stable(t, s, "wxapp", "appsecret", true); a.Errcode != 45009 {
		t.Fatalf("fourth force of a 3-a-day limit: %+v, want errcode 45009", a)
	}
	c.Advance(24 * time.Hour)
	mustToken(t, stable(t, s, "wxapp", "appsecret", true))
}

func TestWeComReturnsSameTokenWhileValid(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{ExpiresIn: 10 * time.Second})
	a := wecom(t, s, "wwcorp", "corpsecret")
	first := mustToken(t, a)
	if a.ExpiresIn != 10 {
		t.Fatalf("expires_in = %d, want 10", a.ExpiresIn)
	}
	c.Advance(9 * time.Second)
	if got := mustToken(t, wecom(t, s, "wwcorp", "corpsecret")); got != first {
		t.Fatal("wecom changed a valid token")
	}
	c.Advance(time.Second)
	if code := validity(t, s, first); code != 42001 {
		t.Fatalf("expired wecom token: errcode %d, want 42001", code)
	}
	if got := mustToken(t, wecom(t, s, "wwcorp", "corpsecret")); got == first {
		t.Fatal("wecom returned an expired token")
	}
}

func TestRevokeTokens(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	older := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	cl := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	st := mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	wc := mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	s.RevokeTokens("wxapp")
	s.RevokeTokens("wwcorp")
	for tok, want := range map[string]int{older: 40001, cl: 40001, st: 40001, wc: 40014} {
		if code := validity(t, s, tok); code != want {
			t.Errorf("revoked %s: errcode %d, want %d", tok, code, want)
		}
	}
	if mustToken(t, stable(t, s, "wxapp", "appsecret", false)) == st {
		t.Error("stable returned a revoked token")
	}
	if mustToken(t, wecom(t, s, "wwcorp", "corpsecret")) == wc {
		t.Error("wecom returned a revoked token")
	}
}

func TestRejections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		send func(t *testing.T, s *Server) answer
		want int
	}{
		{"an unknown appid gets 40013", func(t *testing.T, s *Server) answer { return classic(t, s, "wxnone", "appsecret") }, 40013},
		{"a wrong secret gets 40125", func(t *testing.T, s *Server) answer { return classic(t, s, "wxapp", "wrong") }, 40125},
		{"a missing appid gets 41002", func(t *testing.T, s *Server) answer { return classic(t, s, "", "appsecret") }, 41002},
		{"a missing secret gets 41004", func(t *testing.T, s *Server) answer { return classic(t, s, "wxapp", "") }, 41004},
		{"an app outside the whitelist gets 40164", func(t *testing.T, s *Server) answer { return classic(t, s, "wxblocked", "blocked") }, 40164},
		{"stable checks the secret too", func(t *testing.T, s *Server) answer { return stable(t, s, "wxapp", "wrong", false) }, 40125},
		{"stable checks the whitelist too", func(t *testing.T, s *Server) answer { return stable(t, s, "wxblocked", "blocked", false) }, 40164},
		{"a wrong grant_type gets 40002", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodGet, "/cgi-bin/token?grant_type=password&appid=wxapp&secret=appsecret", nil)
		}, 40002},
		{"classic over POST gets 43001", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodPost, "/cgi-bin/token?grant_type=client_credential&appid=wxapp&secret=appsecret", nil)
		}, 43001},
		{"stable over GET gets 43002", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodGet, "/cgi-bin/stable_token", nil)
		}, 43002},
		{"stable with a body that is not JSON gets 47001", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodPost, "/cgi-bin/stable_token", "not an object")
		}, 47001},
		{"a WeChat appid is unknown to WeCom", func(t *testing.T, s *Server) answer { return wecom(t, s, "wxapp", "appsecret") }, 40013},
		{"a wrong corpsecret gets 40001", func(t *testing.T, s *Server) answer { return wecom(t, s, "wwcorp", "wrong") }, 40001},
		{"a corp outside the whitelist gets 60020", func(t *testing.T, s *Server) answer { return wecom(t, s, "wwblocked", "blocked") }, 60020},
		{"a missing corpid gets 41002", func(t *testing.T, s *Server) answer { return wecom(t, s, "", "corpsecret") }, 41002},
		{"validation without a token gets 41001", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodGet, "/cgi-bin/get_api_domain_ip", nil)
		}, 41001},
		{"validation of a token never issued gets 40001", func(t *testing.T, s *Server) answer {
			return do(t, s, http.MethodGet, "/cgi-bin/get_api_domain_ip?access_token=made-up", nil)
		}, 40001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewHandler(Options{
				Apps:           map[string]string{"wxapp": "appsecret", "wxblocked": "blocked"},
				Corps:          map[string]string{"wwcorp": "corpsecret", "wwblocked": "blocked"},
				NotWhitelisted: []string{"wxblocked", "wwblocked"},
			})
			a := tt.send(t, s)
			if a.Errcode != tt.want || a.Errmsg == "" || a.AccessToken != "" {
				t.Fatalf("got %+v, want errcode %d with a message and no token", a, tt.want)
			}
		})
	}
}

func TestSetWhitelistedAndAddApp(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	s.SetWhitelisted("wxapp", false)
	if a := classic(t, s, "wxapp", "appsecret"); a.Errcode != 40164 {
		t.Fatalf("got %+v, want 40164", a)
	}
	s.SetWhitelisted("wxapp", true)
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	s.AddApp("wxapp", "rotated")
	if a := classic(t, s, "wxapp", "appsecret"); a.Errcode != 40125 {
		t.Fatalf("old secret after rotation: %+v, want 40125", a)
	}
	mustToken(t, classic(t, s, "wxapp", "rotated"))
}

func TestDailyQuota(t *testing.T) {
	t.Parallel()
	s, c := fixture(Options{DailyQuota: 2, StableDailyQuota: 1})
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	if a := classic(t, s, "wxapp", "appsecret"); a.Errcode != 45009 {
		t.Fatalf("third classic mint of 2 a day: %+v, want 45009", a)
	}
	mustToken(t, stable(t, s, "wxapp", "appsecret", false))
	if a := stable(t, s, "wxapp", "appsecret", false); a.Errcode != 45009 {
		t.Fatalf("second stable call of 1 a day: %+v, want 45009", a)
	}
	mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	mustToken(t, wecom(t, s, "wwcorp", "corpsecret"))
	if a := wecom(t, s, "wwcorp", "corpsecret"); a.Errcode != 45009 {
		t.Fatalf("third wecom call of 2 a day: %+v, want 45009", a)
	}
	c.Advance(14 * time.Hour) // past midnight in Beijing
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
}

func TestUnlimitedWhenNegative(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{DailyQuota: -1, ForceRefreshPerDay: -1, ForceRefreshInterval: -1, ClassicGrace: -1})
	first := mustToken(t, classic(t, s, "wxapp", "appsecret"))
	for range 2100 {
		mustToken(t, classic(t, s, "wxapp", "appsecret"))
	}
	if code := validity(t, s, first); code != 40001 {
		t.Fatalf("superseded token without a grace window: errcode %d, want 40001", code)
	}
	for range 25 {
		mustToken(t, stable(t, s, "wxapp", "appsecret", true))
	}
}

func TestInjectedFailures(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	s.FailNext(2, -1)
	s.FailHTTPNext(1, http.StatusBadGateway)
	for range 2 {
		if a := classic(t, s, "wxapp", "appsecret"); a.Errcode != -1 || a.Errmsg != "system error" {
			t.Fatalf("got %+v, want errcode -1", a)
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cgi-bin/gettoken?corpid=wwcorp&corpsecret=corpsecret", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("HTTP %d, want 502", rec.Code)
	}
	mustToken(t, classic(t, s, "wxapp", "appsecret"))
	if s.Mints("wxapp") != 3 || s.Mints("wwcorp") != 1 || s.TotalMints() != 4 || s.Issued("wxapp") != 1 {
		t.Fatalf("Mints wxapp=%d wwcorp=%d total=%d Issued=%d; want 3, 1, 4, 1",
			s.Mints("wxapp"), s.Mints("wwcorp"), s.TotalMints(), s.Issued("wxapp"))
	}
}

func TestLatencyGivesWayToTheClient(t *testing.T) {
	t.Parallel()
	s := New(Options{Apps: map[string]string{"wxapp": "appsecret"}})
	defer s.Close()
	s.SetLatency(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/cgi-bin/token?grant_type=client_credential&appid=wxapp&secret=appsecret", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("request with a 50 ms deadline against a minute of latency succeeded")
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("took %s", elapsed)
	}
	s.SetLatency(0)
	resp, err := http.Get(s.URL() + "/cgi-bin/token?grant_type=client_credential&appid=wxapp&secret=appsecret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.Mints("wxapp") != 2 {
		t.Fatalf("Mints = %d, want 2", s.Mints("wxapp"))
	}
}

func TestConcurrentMintsAreCounted(t *testing.T) {
	t.Parallel()
	s, _ := fixture(Options{})
	const n = 64
	var wg sync.WaitGroup
	tokens := make([]string, n)
	for i := range n {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cgi-bin/gettoken?corpid=wwcorp&corpsecret=corpsecret", nil))
			var a answer
			_ = json.Unmarshal(rec.Body.Bytes(), &a)
			tokens[i] = a.AccessToken
		})
	}
	wg.Wait()
	for _, tok := range tokens {
		if tok == "" || tok != tokens[0] {
			t.Fatalf("concurrent wecom calls got different tokens: %q vs %q", tok, tokens[0])
		}
	}
	if s.Mints("wwcorp") != n || s.Issued("wwcorp") != 1 {
		t.Fatalf("Mints = %d, Issued = %d; want %d and 1", s.Mints("wwcorp"), s.Issued("wwcorp"), n)
	}
}

func TestNewHandlerHasNoURL(t *testing.T) {
	t.Parallel()
	s := NewHandler(Options{})
	if s.URL() != "" {
		t.Fatalf("URL = %q", s.URL())
	}
	s.Close() // no-op
}
