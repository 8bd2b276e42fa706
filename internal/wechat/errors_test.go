package wechat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
)

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		errcode int
		want    Class
	}{
		{"system busy is unavailable", -1, ClassUnavailable},
		{"an unknown errcode is unavailable", 99999, ClassUnavailable},
		{"42001 (expired token, not a mint error) is unavailable", 42001, ClassUnavailable},
		{"40001 on a token endpoint is a wrong secret", 40001, ClassCredentials},
		{"40164 is an IP outside the whitelist", 40164, ClassCredentials},
		{"89503 awaits the admin", 89503, ClassCredentials},
		{"40091 is a bad WeCom secret", 40091, ClassCredentials},
		{"45009 is the daily quota", 45009, ClassQuota},
		{"45011 is the minute quota", 45011, ClassQuota},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ClassOf(tt.errcode); got != tt.want {
				t.Fatalf("ClassOf(%d) = %s, want %s", tt.errcode, got, tt.want)
			}
		})
	}
}

func TestErrorInfo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    *Error
		reason string
		meta   map[string]string
	}{
		{"an errcode reply carries errcode and errmsg",
			&Error{Class: ClassCredentials, Errcode: 40164, Errmsg: "invalid ip", Endpoint: "h/p"},
			"WECHAT_CREDENTIALS_REJECTED", map[string]string{"endpoint": "h/p", "errcode": "40164", "errmsg": "invalid ip"}},
		{"a quota reply says so",
			&Error{Class: ClassQuota, Errcode: 45009, Errmsg: "reach max api daily quota limit", Endpoint: "h/p"},
			"WECHAT_QUOTA_EXHAUSTED", map[string]string{"endpoint": "h/p", "errcode": "45009", "errmsg": "reach max api daily quota limit"}},
		{"an HTTP failure carries its status",
			&Error{Class: ClassUnavailable, HTTPStatus: 502, Endpoint: "h/p"},
			"WECHAT_UNAVAILABLE", map[string]string{"endpoint": "h/p", "httpStatus": "502"}},
		{"a transport failure carries only the endpoint",
			&Error{Class: ClassUnavailable, Err: io.ErrUnexpectedEOF, Endpoint: "h/p"},
			"WECHAT_UNAVAILABLE", map[string]string{"endpoint": "h/p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reason, meta := tt.err.ErrorInfo()
			if reason != tt.reason || fmt.Sprint(meta) != fmt.Sprint(tt.meta) {
				t.Fatalf("got %s %v, want %s %v", reason, meta, tt.reason, tt.meta)
			}
		})
	}
}

func TestErrorUnwrapsItsCause(t *testing.T) {
	t.Parallel()
	err := error(&Error{Class: ClassUnavailable, Err: io.ErrUnexpectedEOF, Endpoint: "h/p"})
	if !errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v", err)
	}
	if got := err.Error(); got != "wechat: h/p: unexpected EOF (unavailable)" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	c, err := NewClient(Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := c.url + "?appid=" + testAppID + "&secret=" + url.QueryEscape(testSecret)
	tests := []struct {
		name string
		in   error
		is   error // still matched after scrubbing; nil if flattened
	}{
		{"a top-level *url.Error is peeled", &url.Error{Op: "Get", URL: full, Err: io.ErrUnexpectedEOF}, io.ErrUnexpectedEOF},
		{"nested *url.Errors are peeled", &url.Error{Op: "Get", URL: full, Err: &url.Error{Op: "Get", URL: full, Err: io.EOF}}, io.EOF},
		{"a *url.Error below another layer is flattened", fmt.Errorf("wrapped: %w", &url.Error{Op: "Get", URL: full, Err: io.EOF}), nil},
		{"a cause quoting the secret is masked", fmt.Errorf("odd %s: %w", testSecret, io.EOF), nil},
		{"a cause quoting the URL is masked", fmt.Errorf("dial %s: %w", c.url, context.Canceled), nil},
		{"a clean cause is kept", io.EOF, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := c.http.Scrub(tt.in)
			assertNoSecret(t, got)
			if strings.Contains(got.Error(), c.url) {
				t.Fatalf("URL in %q", got)
			}
			if tt.is != nil && !errors.Is(got, tt.is) {
				t.Fatalf("%v lost %v", got, tt.is)
			}
		})
	}
}
