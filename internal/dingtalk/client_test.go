package dingtalk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/clocktest"
	"github.com/lockd/lockd/internal/upstream"
	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

const (
	testAppKey = "dingabc123"
	testSecret = "S3cr+t/ab&c=d<e>"
)

func TestMintRenewsTheSameToken(t *testing.T) {
	t.Parallel()
	for _, api := range []string{upstream.TokenAPIV1, upstream.TokenAPILegacy} {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.New(time.Now())
			fake := wechatfake.New(wechatfake.Options{DingTalk: map[string]string{testAppKey: testSecret}, Now: clock.Now})
			t.Cleanup(fake.Close)
			c, err := NewClient(upstream.Config{Provider: upstream.DingTalk, TokenAPI: api, APIBase: fake.URL(), AppID: testAppKey, Secret: testSecret}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			t1, err := c.Mint(ctx, false)
			if err != nil || t1.ExpiresIn != 7200*time.Second {
				t.Fatalf("Mint = %v, %v", t1, err)
			}
			clock.Advance(time.Hour)
			t2, err := c.Mint(ctx, false)
			if err != nil || t2.AccessToken != t1.AccessToken || t2.ExpiresIn != 7200*time.Second {
				t.Fatalf("a repeat Mint = %v, %v; want the same token with its life renewed", t2, err)
			}
			clock.Advance(7201 * time.Second)
			t3, err := c.Mint(ctx, false)
			if err != nil || t3.AccessToken == t1.AccessToken {
				t.Fatalf("Mint after expiry = %v, %v; want a new token", t3, err)
			}
			if tr := c.Traits(); !tr.Renews || tr.FreshWindow != 0 || tr.Probe {
				t.Fatalf("Traits = %+v", tr)
			}
		})
	}
}

func TestMintErrors(t *testing.T) {
	t.Parallel()
	fake := wechatfake.New(wechatfake.Options{DingTalk: map[string]string{testAppKey: testSecret}})
	t.Cleanup(fake.Close)
	tests := []struct {
		name  string
		api   string
		prep  func()
		class error
		code  string
	}{
		{"a wrong secret on the current API is invalidClientIdOrSecret", upstream.TokenAPIV1, nil, upstream.ErrCredentials, "invalidClientIdOrSecret"},
		{"a wrong secret on the legacy API is 40089", upstream.TokenAPILegacy, nil, upstream.ErrCredentials, "40089"},
		{"HTTP 429 is a quota", upstream.TokenAPIV1, func() { fake.FailHTTPNext(1, http.StatusTooManyRequests) }, upstream.ErrQuota, ""},
		{"HTTP 503 is transient", upstream.TokenAPILegacy, func() { fake.FailHTTPNext(1, http.StatusServiceUnavailable) }, upstream.ErrUnavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := "wrong-" + testSecret
			if tt.prep != nil {
				tt.prep()
				secret = testSecret
			}
			c, err := NewClient(upstream.Config{Provider: upstream.DingTalk, TokenAPI: tt.api, APIBase: fake.URL(), AppID: testAppKey, Secret: secret}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Mint(context.Background(), false)
			var e *upstream.Error
			if !errors.Is(err, tt.class) || !errors.As(err, &e) || e.CodeText() != tt.code {
				t.Fatalf("Mint = %v; want %v with code %q", err, tt.class, tt.code)
			}
			if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, e), "S3cr") {
				t.Fatalf("the secret shows in %v", err)
			}
			if reason, meta := e.ErrorInfo(); !strings.HasPrefix(reason, "DINGTALK_") || meta["provider"] != upstream.DingTalk {
				t.Fatalf("ErrorInfo = %q, %v", reason, meta)
			}
		})
	}
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		errcode int
		code    string
		status  int
		want    upstream.Class
	}{
		{0, "invalidClientIdOrSecret", 400, upstream.ClassCredentials},
		{0, "Forbidden.AccessDenied.IpNotInWhiteList", 403, upstream.ClassCredentials},
		{0, "Throttling.Api", 429, upstream.ClassQuota},
		{0, "ServiceUnavailable", 503, upstream.ClassUnavailable},
		{90018, "", 200, upstream.ClassQuota},
		{-1, "", 200, upstream.ClassUnavailable},
		{60020, "", 200, upstream.ClassCredentials},
	}
	for _, tt := range tests {
		if got := ClassOf(tt.errcode, tt.code, tt.status); got != tt.want {
			t.Errorf("ClassOf(%d, %q, %d) = %v, want %v", tt.errcode, tt.code, tt.status, got, tt.want)
		}
	}
}
