package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// The secret has characters that URL and JSON encodings change, so that
// every spelling of it is searched for.
const (
	testAppID  = "wx0123456789abcdef"
	testSecret = "S3cr+t/ab&c=d<e>"
)

var secretForms = []string{
	testSecret,
	url.QueryEscape(testSecret),
	url.PathEscape(testSecret),
	`S3cr+t/ab\u0026c=d\u003ce\u003e`,
	"S3cr", // a prefix would betray truncation bugs too
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Provider: WeChat, AppID: testAppID, Secret: testSecret}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" = valid
	}{
		{"a wechat app with defaults is valid", func(*Config) {}, ""},
		{"a wechat app on the stable API is valid", func(c *Config) { c.TokenAPI = TokenAPIStable }, ""},
		{"a wecom corp is valid", func(c *Config) { c.Provider = WeCom }, ""},
		{"an http api_base with a path is valid", func(c *Config) { c.APIBase = "http://127.0.0.1:9480/proxy/" }, ""},
		{"a missing provider is refused", func(c *Config) { c.Provider = "" }, "provider"},
		{"an unknown provider is refused", func(c *Config) { c.Provider = "WeChat" }, "provider"},
		{"an unknown token_api is refused", func(c *Config) { c.TokenAPI = "fast" }, "token_api"},
		{"a token_api for wecom is refused", func(c *Config) { c.Provider, c.TokenAPI = WeCom, TokenAPIStable }, "token_api"},
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
		{"a feishu tenant app is valid", func(c *Config) { c.Provider = Feishu }, ""},
		{"a feishu app_access_token app on Lark is valid", func(c *Config) {
			c.Provider, c.TokenAPI, c.APIBase = Feishu, TokenAPIApp, "https://open.larksuite.com"
		}, ""},
		{"a feishu token_api of wechat's is refused", func(c *Config) { c.Provider, c.TokenAPI = Feishu, TokenAPIStable }, "token_api"},
		{"a dingtalk app is valid", func(c *Config) { c.Provider = DingTalk }, ""},
		{"a dingtalk app on the legacy API is valid", func(c *Config) { c.Provider, c.TokenAPI = DingTalk, TokenAPILegacy }, ""},
		{"an oauth2 client with scope, audience and body credentials is valid", func(c *Config) {
			c.Provider, c.TokenURL, c.Scope, c.Audience, c.AuthStyle = OAuth2, "https://auth.example.com/oauth2/token", "read write", "https://api.example.com", AuthBody
		}, ""},
		{"an oauth2 client without token_url is refused", func(c *Config) { c.Provider = OAuth2 }, "token_url"},
		{"an oauth2 client with api_base is refused", func(c *Config) {
			c.Provider, c.TokenURL, c.APIBase = OAuth2, "https://auth.example.com/token", "https://auth.example.com"
		}, "api_base"},
		{"an oauth2 token_url with user info is refused", func(c *Config) {
			c.Provider, c.TokenURL = OAuth2, "https://id:"+testSecret+"@auth.example.com/token"
		}, "token_url"},
		{"an oauth2 token_url with a query is refused", func(c *Config) { c.Provider, c.TokenURL = OAuth2, "https://auth.example.com/token?x=1" }, "token_url"},
		{"an unknown auth_style is refused", func(c *Config) {
			c.Provider, c.TokenURL, c.AuthStyle = OAuth2, "https://auth.example.com/token", "jwt"
		}, "auth_style"},
		{"a scope with a newline is refused", func(c *Config) {
			c.Provider, c.TokenURL, c.Scope = OAuth2, "https://auth.example.com/token", "read\nwrite"
		}, "scope"},
		{"a token_url for wechat is refused", func(c *Config) { c.TokenURL = "https://auth.example.com/token" }, "token_url"},
		{"a scope for feishu is refused", func(c *Config) { c.Provider, c.Scope = Feishu, "all" }, "scope"},
		{"an auth_style for dingtalk is refused", func(c *Config) { c.Provider, c.AuthStyle = DingTalk, AuthBody }, "auth_style"},
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
			if !strings.HasPrefix(msg, "upstream: invalid config: "+tt.field) {
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
	cfg := Config{Provider: WeChat, AppID: testAppID, Secret: testSecret}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("app", "cfg", cfg)
	oauth := Config{Provider: OAuth2, TokenURL: "https://auth.example.com/token", AppID: testAppID, Secret: testSecret, Scope: "read"}
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("app", "cfg", oauth)
	outputs := map[string]string{
		"%v":        fmt.Sprintf("%v", cfg),
		"%+v":       fmt.Sprintf("%+v", cfg),
		"%#v":       fmt.Sprintf("%#v", cfg),
		"&%v":       fmt.Sprintf("%v", &cfg),
		"slog":      logged.String(),
		"oauth2 %v": fmt.Sprintf("%v", oauth),
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
