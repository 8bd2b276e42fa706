package feishu

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

const (
	testAppID  = "cli_a1b2c3"
	testSecret = "S3cr+t/ab&c=d<e>"
)

func newClient(t *testing.T, cfg upstream.Config) *Client {
	t.Helper()
	c, err := NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMintAgainstFake(t *testing.T) {
	t.Parallel()
	for _, api := range []string{upstream.TokenAPITenant, upstream.TokenAPIApp} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			fake := wechatfake.New(wechatfake.Options{Feishu: map[string]string{testAppID: testSecret}, FeishuFreshWindow: 3 * time.Hour})
			t.Cleanup(fake.Close)
			c := newClient(t, upstream.Config{Provider: upstream.Feishu, TokenAPI: api, APIBase: fake.URL(), AppID: testAppID, Secret: testSecret})
			ctx := context.Background()
			t1, err := c.Mint(ctx, false)
			if err != nil || t1.ExpiresIn != 7200*time.Second || !fake.Valid(t1.AccessToken) {
				t.Fatalf("Mint = %v, %v", t1, err)
			}
			// With a window longer than the lifetime, every call hands out a new one.
			t2, err := c.Mint(ctx, true)
			if err != nil || t2.AccessToken == t1.AccessToken || !fake.Valid(t1.AccessToken) {
				t.Fatalf("second Mint = %v, %v; the first must stay valid", t2, err)
			}
			if tr := c.Traits(); tr.FreshWindow != FreshWindow || tr.Probe || tr.Renews || len(tr.TicketTypes) != 0 {
				t.Fatalf("Traits = %+v", tr)
			}
		})
	}
}

func TestMintErrors(t *testing.T) {
	t.Parallel()
	fake := wechatfake.New(wechatfake.Options{Feishu: map[string]string{testAppID: testSecret}})
	t.Cleanup(fake.Close)
	tests := []struct {
		name  string
		cfg   upstream.Config
		prep  func()
		class error
		code  int
	}{
		{"a wrong secret is 10014, the credentials' fault",
			upstream.Config{Provider: upstream.Feishu, APIBase: fake.URL(), AppID: testAppID, Secret: "wrong-" + testSecret}, nil, upstream.ErrCredentials, 10014},
		{"an unknown app is 10003",
			upstream.Config{Provider: upstream.Feishu, APIBase: fake.URL(), AppID: "cli_nope", Secret: testSecret}, nil, upstream.ErrCredentials, 10003},
		{"HTTP 429 is a quota",
			upstream.Config{Provider: upstream.Feishu, APIBase: fake.URL(), AppID: testAppID, Secret: testSecret},
			func() { fake.FailHTTPNext(1, http.StatusTooManyRequests) }, upstream.ErrQuota, 0},
		{"a 502 is transient",
			upstream.Config{Provider: upstream.Feishu, APIBase: fake.URL(), AppID: testAppID, Secret: testSecret},
			func() { fake.FailHTTPNext(1, http.StatusBadGateway) }, upstream.ErrUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.prep != nil {
				tt.prep()
			}
			_, err := newClient(t, tt.cfg).Mint(context.Background(), false)
			var e *upstream.Error
			if !errors.Is(err, tt.class) || !errors.As(err, &e) || e.Errcode != tt.code || e.Provider != upstream.Feishu {
				t.Fatalf("Mint = %v; want %v with code %d", err, tt.class, tt.code)
			}
			if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, e), "S3cr") {
				t.Fatalf("the secret shows in %v", err)
			}
			if reason, _ := e.ErrorInfo(); !strings.HasPrefix(reason, "FEISHU_") {
				t.Fatalf("reason %q", reason)
			}
		})
	}
}

func TestMintRequestAndOddAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer string
		status int
		class  error
	}{
		{"a code in an HTTP 200 answer", `{"code":99991400,"msg":"request trigger frequency limit"}`, 200, upstream.ErrQuota},
		{"an answer without the token", `{"code":0,"msg":"ok","expire":7200}`, 200, upstream.ErrUnavailable},
		{"an answer that is not JSON", `<html>busy</html>`, 200, upstream.ErrUnavailable},
		{"a negative expire", `{"code":0,"tenant_access_token":"t-1","expire":-1}`, 200, upstream.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/open-apis/auth/v3/tenant_access_token/internal" ||
					!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
					t.Errorf("request %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.answer)
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, upstream.Config{Provider: upstream.Feishu, APIBase: srv.URL, AppID: testAppID, Secret: testSecret})
			if _, err := c.Mint(context.Background(), false); !errors.Is(err, tt.class) {
				t.Fatalf("Mint = %v, want %v", err, tt.class)
			}
		})
	}
}

func TestTokenRejected(t *testing.T) {
	t.Parallel()
	for _, code := range []int{99991661, 99991663, 99991664, 99991668, 99991671, 99991677} {
		if !TokenRejected(code) {
			t.Errorf("%d", code)
		}
	}
	if TokenRejected(10014) || TokenRejected(0) {
		t.Error("10014 and 0 do not say a token was refused")
	}
}
