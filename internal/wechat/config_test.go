package wechat

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" = valid
	}{
		{"a wechat app with defaults is valid", func(*Config) {}, ""},
		{"a wechat app on the stable API is valid", func(c *Config) { c.TokenAPI = TokenAPIStable }, ""},
		{"a wecom corp is valid", func(c *Config) { c.Provider = ProviderWeCom }, ""},
		{"an http api_base with a path is valid", func(c *Config) { c.APIBase = "http://127.0.0.1:9480/proxy/" }, ""},
		{"a missing provider is refused", func(c *Config) { c.Provider = "" }, "provider"},
		{"an unknown provider is refused", func(c *Config) { c.Provider = "WeChat" }, "provider"},
		{"an unknown token_api is refused", func(c *Config) { c.TokenAPI = "fast" }, "token_api"},
		{"a token_api for wecom is refused", func(c *Config) { c.Provider, c.TokenAPI = ProviderWeCom, TokenAPIStable }, "token_api"},
		{"an api_base without scheme is refused", func(c *Config) { c.APIBase = "api.weixin.qq.com" }, "api_base"},
		{"an ftp api_base is refused", func(c *Config) { c.APIBase = "ftp://api.weixin.qq.com" }, "api_base"},
		{"an api_base without host is refused", func(c *Config) { c.APIBase = "https:///cgi-bin" }, "api_base"},
		{"an api_base with a query is refused", func(c *Config) { c.APIBase = "https://api.weixin.qq.com/?x=1" }, "api_base"},
		{"an api_base with user info is refused", func(c *Config) { c.APIBase = "https://u:" + testSecret + "@proxy" }, "api_base"},
		{"an unparsable api_base is refused", func(c *Config) { c.APIBase = "https://[::1" + testSecret }, "api_base"},
		{"a missing appid is refused", func(c *Config) { c.AppID = "" }, "appid"},
		{"an appid with a space is refused", func(c *Config) { c.AppID = "wx 1" }, "appid"},
		{"a missing secret is refused", func(c *Config) { c.Secret = "" }, "secret"},
		{"a secret with a trailing newline is refused", func(c *Config) { c.Secret = testSecret + "\n" }, "secret"},
		{"a secret with a control character is refused", func(c *Config) { c.Secret = "ab\x00" + testSecret }, "secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tt.edit(&c)
			err := c.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "wechat: invalid config: "+tt.field) {
				t.Fatalf("%q does not name %s first", msg, tt.field)
			}
			for _, form := range secretForms {
				if strings.Contains(msg, form) {
					t.Fatalf("secret in %q", msg)
				}
			}
		})
	}
}

func TestConfigPrintsWithoutSecret(t *testing.T) {
	t.Parallel()
	cfg := Config{Provider: ProviderWeChat, AppID: testAppID, Secret: testSecret}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("app", "cfg", cfg)
	c, err := NewClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"%v":    fmt.Sprintf("%v", cfg),
		"%+v":   fmt.Sprintf("%+v", cfg),
		"%#v":   fmt.Sprintf("%#v", cfg),
		"&%v":   fmt.Sprintf("%v", &cfg),
		"slog":  logged.String(),
		"%v of": fmt.Sprintf("%v", c),
		"%s of": fmt.Sprintf("%s", c),
	}
	for verb, out := range outputs {
		if strings.Contains(out, testSecret) || !strings.Contains(out, testAppID) {
			t.Errorf("%s: %q", verb, out)
		}
	}
}

// FuzzValidate checks that Validate never panics and never reveals the
// secret, whatever the fields hold.
func FuzzValidate(f *testing.F) {
	f.Add("wechat", "classic", "https://api.weixin.qq.com", "wx1", "s3cret")
	f.Add("wecom", "", "http://[::1]:80/x", "ww1", "s e c")
	f.Add("", "stable", "%zz", "", "\n")
	f.Fuzz(func(t *testing.T, provider, api, base, appid, secret string) {
		cfg := Config{Provider: provider, TokenAPI: api, APIBase: base, AppID: appid, Secret: secret}
		err := cfg.Validate()
		if err == nil {
			if _, err := NewClient(cfg, nil); err != nil {
				t.Fatalf("Validate passed but NewClient failed: %v", err)
			}
			return
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%v does not wrap ErrInvalidConfig", err)
		}
		// Only secrets long enough to be told apart from the rest of the
		// message are checked; a one-letter secret is in every message.
		if len(secret) >= 8 && !strings.Contains(appid+base+api+provider, secret) && strings.Contains(err.Error(), secret) {
			t.Fatalf("secret %q in %q", secret, err)
		}
	})
}
