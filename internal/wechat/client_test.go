package wechat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

// The secret has characters that URL and JSON encodings change, so that
// every spelling of it is searched for.
const (
	testAppID  = "wx0123456789abcdef"
	testCorpID = "ww0123456789abcdef"
	testSecret = "S3cr+t/ab&c=d<e>"
)

var secretForms = []string{
	testSecret,
	url.QueryEscape(testSecret),
	url.PathEscape(testSecret),
	`S3cr+t/ab\u0026c=d\u003ce\u003e`,
	"S3cr", // a prefix would betray truncation bugs too
}

// assertNoSecret fails when the secret shows anywhere in err: its message,
// its %+v and %#v forms, and every error in its chain.
func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	var texts []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		texts = append(texts, e.Error(), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e))
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	for _, text := range texts {
		for _, form := range secretForms {
			if strings.Contains(text, form) {
				t.Fatalf("secret form %q in %q", form, text)
			}
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		t.Fatalf("a *url.Error is still in the chain: %v", err)
	}
}

func newFake(t *testing.T, opts wechatfake.Options) *wechatfake.Server {
	t.Helper()
	opts.Apps = map[string]string{testAppID: testSecret}
	opts.Corps = map[string]string{testCorpID: testSecret}
	s := wechatfake.New(opts)
	t.Cleanup(s.Close)
	return s
}

func newTestClient(t *testing.T, base, provider, api string, hc *http.Client) *Client {
	t.Helper()
	id := testAppID
	if provider == ProviderWeCom {
		id = testCorpID
	}
	c, err := NewClient(Config{Provider: provider, TokenAPI: api, APIBase: base, AppID: id, Secret: testSecret}, hc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var flavours = []struct {
	name, provider, api string
}{
	{"wechat classic", ProviderWeChat, TokenAPIClassic},
	{"wechat stable", ProviderWeChat, TokenAPIStable},
	{"wecom", ProviderWeCom, ""},
}

func TestMintAgainstFake(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		t.Run(f.name+" mints a token the fake accepts", func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{})
			c := newTestClient(t, fake.URL(), f.provider, f.api, nil)
			tok, err := c.Mint(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			if tok.AccessToken == "" || tok.ExpiresIn != 7200*time.Second {
				t.Fatalf("got %v", tok)
			}
			if !fake.Valid(tok.AccessToken) {
				t.Fatal("the fake does not accept the token")
			}
			if strings.Contains(tok.String(), tok.AccessToken) {
				t.Fatalf("Token.String shows the token: %s", tok)
			}
		})
	}
}

func TestMintForceRefresh(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, provider, api string
		forces              bool
		sameAfterForce      bool
	}{
		{"stable revokes the current token", ProviderWeChat, TokenAPIStable, true, false},
		{"classic mints a new token regardless", ProviderWeChat, TokenAPIClassic, false, false},
		{"wecom ignores it and keeps the valid token", ProviderWeCom, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{})
			c := newTestClient(t, fake.URL(), tt.provider, tt.api, nil)
			if c.ForceRefreshes() != tt.forces {
				t.Fatalf("ForceRefreshes = %v", c.ForceRefreshes())
			}
			first, err := c.Mint(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			second, err := c.Mint(t.Context(), true)
			if err != nil {
				t.Fatal(err)
			}
			if (first.AccessToken == second.AccessToken) != tt.sameAfterForce {
				t.Fatalf("same token after forceRefresh = %v, want %v", !tt.sameAfterForce, tt.sameAfterForce)
			}
			if tt.forces && fake.Valid(first.AccessToken) {
				t.Fatal("the token replaced by force_refresh is still valid")
			}
		})
	}
}

// TestMintRequestShape checks each API's request on the wire.
func TestMintRequestShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, provider, api string
		force               bool
		method, path        string
		query               url.Values
		body                map[string]any
	}{
		{"classic sends appid and secret in the query", ProviderWeChat, TokenAPIClassic, false, http.MethodGet, "/cgi-bin/token",
			url.Values{"grant_type": {"client_credential"}, "appid": {testAppID}, "secret": {testSecret}}, nil},
		{"classic ignores forceRefresh", ProviderWeChat, TokenAPIClassic, true, http.MethodGet, "/cgi-bin/token",
			url.Values{"grant_type": {"client_credential"}, "appid": {testAppID}, "secret": {testSecret}}, nil},
		{"stable posts JSON with force_refresh false", ProviderWeChat, TokenAPIStable, false, http.MethodPost, "/cgi-bin/stable_token",
			url.Values{}, map[string]any{"grant_type": "client_credential", "appid": testAppID, "secret": testSecret, "force_refresh": false}},
		{"stable posts JSON with force_refresh true", ProviderWeChat, TokenAPIStable, true, http.MethodPost, "/cgi-bin/stable_token",
			url.Values{}, map[string]any{"grant_type": "client_credential", "appid": testAppID, "secret": testSecret, "force_refresh": true}},
		{"wecom sends corpid and corpsecret in the query", ProviderWeCom, "", true, http.MethodGet, "/cgi-bin/gettoken",
			url.Values{"corpid": {testCorpID}, "corpsecret": {testSecret}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != tt.method || r.URL.Path != "/prefix"+tt.path {
					t.Errorf("got %s %s, want %s /prefix%s", r.Method, r.URL.Path, tt.method, tt.path)
				}
				if got := r.URL.Query(); fmt.Sprint(got) != fmt.Sprint(tt.query) {
					t.Errorf("query %v, want %v", got, tt.query)
				}
				if tt.body != nil {
					if ct := r.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q", ct)
					}
					var got map[string]any
					if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
						t.Error(err)
					}
					if fmt.Sprint(got) != fmt.Sprint(tt.body) {
						t.Errorf("body %v, want %v", got, tt.body)
					}
				}
				fmt.Fprint(w, `{"errcode":0,"errmsg":"ok","access_token":"tok","expires_in":7200}`)
			}))
			defer srv.Close()
			c := newTestClient(t, srv.URL+"/prefix/", tt.provider, tt.api, nil)
			if want := strings.TrimPrefix(srv.URL, "http://") + "/prefix" + tt.path; c.Endpoint() != want {
				t.Errorf("Endpoint = %q, want %q", c.Endpoint(), want)
			}
			if _, err := c.Mint(t.Context(), tt.force); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMintErrcodeClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		errcode int
		want    error
	}{
		{"system busy is unavailable", -1, ErrUnavailable},
		{"a wrong secret (40001) is credentials", 40001, ErrCredentials},
		{"a bad grant_type is credentials", 40002, ErrCredentials},
		{"an invalid appid is credentials", 40013, ErrCredentials},
		{"an invalid appsecret is credentials", 40125, ErrCredentials},
		{"an IP outside the whitelist is credentials", 40164, ErrCredentials},
		{"a frozen AppSecret is credentials", 40243, ErrCredentials},
		{"a missing appid is credentials", 41002, ErrCredentials},
		{"a missing secret is credentials", 41004, ErrCredentials},
		{"a WeCom IP not allowed is credentials", 60020, ErrCredentials},
		{"an unregistered IP is credentials", 61004, ErrCredentials},
		{"a call awaiting admin confirmation is credentials", 89503, ErrCredentials},
		{"the daily limit is quota", 45009, ErrQuota},
		{"the minute limit is quota", 45011, ErrQuota},
		{"an unknown errcode is unavailable", 12345, ErrUnavailable},
	}
	for _, tt := range tests {
		for _, f := range flavours {
			t.Run(tt.name+" for "+f.name, func(t *testing.T) {
				t.Parallel()
				fake := newFake(t, wechatfake.Options{})
				fake.FailNext(1, tt.errcode)
				c := newTestClient(t, fake.URL(), f.provider, f.api, nil)
				_, err := c.Mint(t.Context(), false)
				assertNoSecret(t, err)
				assertOnly(t, err, tt.want)
				var e *Error
				if !errors.As(err, &e) || e.Errcode != tt.errcode || e.Errmsg == "" || e.Unwrap() != nil {
					t.Fatalf("got %#v", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprint(tt.errcode)) {
					t.Fatalf("message %q lacks the errcode", err)
				}
			})
		}
	}
}

// assertOnly checks that err matches want and no other class sentinel.
func assertOnly(t *testing.T, err, want error) {
	t.Helper()
	for _, s := range []error{ErrCredentials, ErrQuota, ErrUnavailable} {
		if errors.Is(err, s) != (s == want) {
			t.Fatalf("errors.Is(%v, %v) = %v", err, s, !(s == want))
		}
	}
}

// TestMintRejectedByFake drives the fake's own checks, not injected errcodes.
func TestMintRejectedByFake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		prepare  func(*wechatfake.Server)
		errcode  int
		sentinel error
	}{
		{"a wrong secret", Config{Provider: ProviderWeChat, AppID: testAppID, Secret: "wrong"}, nil, 40125, ErrCredentials},
		{"an unknown appid", Config{Provider: ProviderWeChat, TokenAPI: TokenAPIStable, AppID: "wxnobody", Secret: testSecret}, nil, 40013, ErrCredentials},
		{"an app outside the whitelist", Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret},
			func(s *wechatfake.Server) { s.SetWhitelisted(testAppID, false) }, 40164, ErrCredentials},
		{"a wrong corpsecret", Config{Provider: ProviderWeCom, AppID: testCorpID, Secret: "wrong"}, nil, 40001, ErrCredentials},
		{"a corp outside the whitelist", Config{Provider: ProviderWeCom, AppID: testCorpID, Secret: testSecret},
			func(s *wechatfake.Server) { s.SetWhitelisted(testCorpID, false) }, 60020, ErrCredentials},
		{"a spent daily quota", Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}, nil, 45009, ErrQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, wechatfake.Options{DailyQuota: 1})
			if tt.prepare != nil {
				tt.prepare(fake)
			}
			tt.cfg.APIBase = fake.URL()
			c, err := NewClient(tt.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.errcode == 45009 {
				if _, err := c.Mint(t.Context(), false); err != nil {
					t.Fatal(err)
				}
			}
			_, err = c.Mint(t.Context(), false)
			assertNoSecret(t, err)
			assertOnly(t, err, tt.sentinel)
			var e *Error
			if !errors.As(err, &e) || e.Errcode != tt.errcode {
				t.Fatalf("got %v, want errcode %d", err, tt.errcode)
			}
		})
	}
}

// closedURL returns the URL of a loopback port nobody listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func body(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, s) }
}

func TestMintTransportAndReplyFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		base     func(t *testing.T) string
		hc       *http.Client
		sentinel error
		status   int
		inMsg    string
	}{
		{"a refused connection is unavailable",
			closedURL, nil, ErrUnavailable, 0, "connection refused"},
		{"an upstream slower than the http.Client timeout is unavailable",
			func(t *testing.T) string {
				fake := newFake(t, wechatfake.Options{})
				fake.SetLatency(time.Minute)
				return fake.URL()
			}, &http.Client{Timeout: 50 * time.Millisecond}, ErrUnavailable, 0, "Timeout"},
		{"HTTP 502 is unavailable",
			func(t *testing.T) string {
				fake := newFake(t, wechatfake.Options{})
				fake.FailHTTPNext(1, http.StatusBadGateway)
				return fake.URL()
			}, nil, ErrUnavailable, 502, "HTTP 502"},
		{"HTTP 503 is unavailable",
			func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) })
			}, nil, ErrUnavailable, 503, "HTTP 503"},
		{"HTTP 429 is quota",
			func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(429) })
			}, nil, ErrQuota, 429, "HTTP 429"},
		{"a redirect is not followed",
			func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, r *http.Request) {
					if strings.HasPrefix(r.URL.Path, "/elsewhere") {
						t.Error("the redirect was followed")
					}
					http.Redirect(w, r, "/elsewhere?"+r.URL.RawQuery, http.StatusFound)
				})
			}, nil, ErrUnavailable, 302, "HTTP 302"},
		{"a body that is not JSON is unavailable",
			func(t *testing.T) string { return serve(t, body("<html>gateway</html>")) }, nil, ErrUnavailable, 0, "unparsable"},
		{"a truncated body is unavailable",
			func(t *testing.T) string { return serve(t, body(`{"access_token":"to`)) }, nil, ErrUnavailable, 0, "unparsable"},
		{"a body over 64 KiB is unavailable",
			func(t *testing.T) string {
				return serve(t, body(`{"access_token":"`+strings.Repeat("x", MaxResponseBytes)+`","expires_in":7200}`))
			}, nil, ErrUnavailable, 0, "longer than"},
		{"a reply without a token is unavailable",
			func(t *testing.T) string { return serve(t, body(`{"errcode":0,"errmsg":"ok","expires_in":7200}`)) },
			nil, ErrUnavailable, 0, "without access_token"},
		{"a reply with a negative expires_in is unavailable",
			func(t *testing.T) string { return serve(t, body(`{"access_token":"tok","expires_in":-5}`)) },
			nil, ErrUnavailable, 0, "expires_in -5"},
		{"a reply with an absurd expires_in is unavailable",
			func(t *testing.T) string {
				return serve(t, body(`{"access_token":"tok","expires_in":9223372036854775807}`))
			},
			nil, ErrUnavailable, 0, "expires_in"},
		{"an errmsg echoing the secret is masked",
			func(t *testing.T) string {
				return serve(t, func(w http.ResponseWriter, r *http.Request) {
					msg, _ := json.Marshal("bad secret " + r.URL.Query().Get("secret") + " from " + r.URL.RawQuery)
					fmt.Fprintf(w, `{"errcode":40125,"errmsg":%s}`, msg)
				})
			}, nil, ErrCredentials, 0, "REDACTED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, tt.base(t), ProviderWeChat, TokenAPIClassic, tt.hc)
			_, err := c.Mint(t.Context(), false)
			assertNoSecret(t, err)
			assertOnly(t, err, tt.sentinel)
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Fatalf("an upstream failure passes for the caller's context: %v", err)
			}
			var e *Error
			if !errors.As(err, &e) || e.HTTPStatus != tt.status || e.Endpoint != c.Endpoint() {
				t.Fatalf("got %#v", err)
			}
			if !strings.Contains(err.Error(), tt.inMsg) || !strings.Contains(err.Error(), c.Endpoint()) {
				t.Fatalf("message %q lacks %q or the endpoint", err, tt.inMsg)
			}
		})
	}
}

func TestMintHonoursCallerContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func(t *testing.T) context.Context
		want error
	}{
		{"a deadline passed while the upstream is slow", func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
		{"a context canceled before the call", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled},
	}
	for _, f := range flavours {
		for _, tt := range tests {
			t.Run(tt.name+" ends "+f.name+" with the context's error", func(t *testing.T) {
				t.Parallel()
				fake := newFake(t, wechatfake.Options{})
				fake.SetLatency(time.Minute)
				c := newTestClient(t, fake.URL(), f.provider, f.api, nil)
				start := time.Now()
				_, err := c.Mint(tt.ctx(t), false)
				if time.Since(start) > 10*time.Second {
					t.Fatal("Mint outlived its context")
				}
				assertNoSecret(t, err)
				assertOnly(t, err, nil)
				if !errors.Is(err, tt.want) {
					t.Fatalf("got %v, want %v", err, tt.want)
				}
			})
		}
	}
}

func TestMintConcurrently(t *testing.T) {
	t.Parallel()
	fake := newFake(t, wechatfake.Options{})
	c := newTestClient(t, fake.URL(), ProviderWeChat, TokenAPIStable, nil)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	toks := make([]Token, n)
	for i := range n {
		wg.Go(func() { toks[i], errs[i] = c.Mint(t.Context(), false) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || toks[i].AccessToken != toks[0].AccessToken {
			t.Fatalf("call %d: %v, %v", i, toks[i], errs[i])
		}
	}
	if fake.Mints(testAppID) != n || fake.Issued(testAppID) != 1 {
		t.Fatalf("Mints = %d, Issued = %d", fake.Mints(testAppID), fake.Issued(testAppID))
	}
}

func TestNewClientDoesNotChangeCallersHTTPClient(t *testing.T) {
	t.Parallel()
	hc := &http.Client{Timeout: time.Second}
	if _, err := NewClient(Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}, hc); err != nil {
		t.Fatal(err)
	}
	if hc.CheckRedirect != nil {
		t.Fatal("NewClient changed the caller's http.Client")
	}
}

func TestNewClientRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := NewClient(Config{Provider: "qq", AppID: testAppID, Secret: testSecret}, nil)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
}

func TestClientDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"wechat defaults to classic on api.weixin.qq.com", Config{Provider: ProviderWeChat}, "api.weixin.qq.com/cgi-bin/token"},
		{"wechat stable posts to stable_token", Config{Provider: ProviderWeChat, TokenAPI: TokenAPIStable}, "api.weixin.qq.com/cgi-bin/stable_token"},
		{"wecom defaults to qyapi.weixin.qq.com", Config{Provider: ProviderWeCom}, "qyapi.weixin.qq.com/cgi-bin/gettoken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.AppID, tt.cfg.Secret = testAppID, testSecret
			c, err := NewClient(tt.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Endpoint() != tt.want {
				t.Fatalf("Endpoint = %q, want %q", c.Endpoint(), tt.want)
			}
			if c.http.HTTPClient().Timeout != DefaultTimeout {
				t.Fatalf("Timeout = %s", c.http.HTTPClient().Timeout)
			}
			if s := c.String(); strings.Contains(s, testSecret) || !strings.Contains(s, testAppID) {
				t.Fatalf("String = %q", s)
			}
		})
	}
}

func TestClientPrintsWithoutSecret(t *testing.T) {
	t.Parallel()
	c, err := NewClient(Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%s", c), fmt.Sprintf("%+v", c)} {
		if strings.Contains(out, testSecret) || !strings.Contains(out, testAppID) {
			t.Errorf("%q", out)
		}
	}
}

func TestNewClientRefusesOtherProviders(t *testing.T) {
	t.Parallel()
	_, err := NewClient(Config{Provider: "feishu", AppID: "cli_1", Secret: testSecret}, nil)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
}
