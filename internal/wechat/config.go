package wechat

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"unicode"
)

// Providers and token APIs accepted in Config.
const (
	// ProviderWeChat is an Official Account or Mini Program (api.weixin.qq.com).
	ProviderWeChat = "wechat"
	// ProviderWeCom is a WeCom (WeChat Work) app: AppID holds the corpid and
	// Secret the app's corpsecret (qyapi.weixin.qq.com).
	ProviderWeCom = "wecom"

	// TokenAPIClassic is GET /cgi-bin/token: every call mints a new token and
	// the previous one stays valid for five more minutes.
	TokenAPIClassic = "classic"
	// TokenAPIStable is POST /cgi-bin/stable_token: the same token while it
	// is valid, and a force_refresh mode that revokes it at once.
	TokenAPIStable = "stable"

	// DefaultWeChatAPIBase is the APIBase of ProviderWeChat when none is set.
	DefaultWeChatAPIBase = "https://api.weixin.qq.com"
	// DefaultWeComAPIBase is the APIBase of ProviderWeCom when none is set.
	DefaultWeComAPIBase = "https://qyapi.weixin.qq.com"
)

// Config names one upstream app and how to mint its access_token.
// Its String, GoString and LogValue methods mask Secret, so a Config can be
// printed or logged as a whole.
type Config struct {
	// Provider is ProviderWeChat or ProviderWeCom.
	Provider string
	// TokenAPI is TokenAPIClassic (the default) or TokenAPIStable; only for
	// ProviderWeChat, empty for ProviderWeCom.
	TokenAPI string
	// APIBase is the scheme, host and optional path prefix of the upstream
	// (tests, proxies); empty means the provider's public host.
	APIBase string
	// AppID is the appid (ProviderWeChat) or corpid (ProviderWeCom).
	AppID string
	// Secret is the AppSecret (ProviderWeChat) or corpsecret (ProviderWeCom).
	Secret string
}

// Validate reports the first problem with c, naming the field as the YAML
// config spells it (provider, token_api, api_base, appid, secret). The error
// wraps ErrInvalidConfig and never contains the secret.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch c.Provider {
	case ProviderWeChat:
		switch c.TokenAPI {
		case "", TokenAPIClassic, TokenAPIStable:
		default:
			return bad("token_api %q: want %q or %q", c.TokenAPI, TokenAPIClassic, TokenAPIStable)
		}
	case ProviderWeCom:
		if c.TokenAPI != "" {
			return bad("token_api %q: only provider %q has a choice of token API", c.TokenAPI, ProviderWeChat)
		}
	case "":
		return bad("provider: missing, want %q or %q", ProviderWeChat, ProviderWeCom)
	default:
		return bad("provider %q: want %q or %q", c.Provider, ProviderWeChat, ProviderWeCom)
	}
	if c.APIBase != "" {
		u, err := url.Parse(c.APIBase)
		switch {
		case err != nil:
			return bad("api_base: not a URL")
		case u.Scheme != "https" && u.Scheme != "http":
			return bad("api_base %q: want an http or https URL", u.Redacted())
		case u.Host == "":
			return bad("api_base %q: no host", u.Redacted())
		case u.User != nil:
			return bad("api_base %q: user info is not allowed", u.Redacted())
		case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
			return bad("api_base %q: query and fragment are not allowed", u.Redacted())
		}
	}
	if c.AppID == "" {
		return bad("appid: missing")
	}
	if i := strings.IndexFunc(c.AppID, notPrintable); i >= 0 {
		return bad("appid %q: has a space or control character at byte %d", c.AppID, i)
	}
	if c.Secret == "" {
		return bad("secret: missing")
	}
	if i := strings.IndexFunc(c.Secret, notPrintable); i >= 0 {
		// Name the position, never the secret; a trailing newline from a
		// secret file is the usual culprit.
		return bad("secret: has a space or control character at byte %d of %d", i, len(c.Secret))
	}
	return nil
}

func notPrintable(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

// withDefaults returns c with TokenAPI and APIBase filled in.
func (c Config) withDefaults() Config {
	if c.Provider == ProviderWeChat && c.TokenAPI == "" {
		c.TokenAPI = TokenAPIClassic
	}
	if c.APIBase == "" {
		c.APIBase = DefaultWeChatAPIBase
		if c.Provider == ProviderWeCom {
			c.APIBase = DefaultWeComAPIBase
		}
	}
	return c
}

// String describes c with the secret masked.
func (c Config) String() string {
	return fmt.Sprintf("{provider=%s token_api=%s api_base=%s appid=%s secret=%s}",
		c.Provider, c.TokenAPI, c.APIBase, c.AppID, maskSecret(c.Secret))
}

// GoString is String, so that %#v masks the secret as well.
func (c Config) GoString() string { return "wechat.Config" + c.String() }

// LogValue lets log/slog print c with the secret masked.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("provider", c.Provider),
		slog.String("token_api", c.TokenAPI),
		slog.String("api_base", c.APIBase),
		slog.String("appid", c.AppID),
		slog.String("secret", maskSecret(c.Secret)),
	)
}

func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}
