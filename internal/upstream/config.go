package upstream

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"unicode"
)

// The providers a Config may name.
const (
	// WeChat is an Official Account or Mini Program (api.weixin.qq.com):
	// AppID is the appid, Secret the AppSecret.
	WeChat = "wechat"
	// WeCom is a WeCom (WeChat Work) app (qyapi.weixin.qq.com): AppID is
	// the corpid, Secret the app's corpsecret.
	WeCom = "wecom"
	// Feishu is a Feishu or Lark internal app (open.feishu.cn; Lark:
	// api_base https://open.larksuite.com): AppID is the app_id, Secret the
	// app_secret.
	Feishu = "feishu"
	// DingTalk is a DingTalk internal app (api.dingtalk.com, or
	// oapi.dingtalk.com for the legacy API): AppID is the appKey (the
	// Client ID), Secret the appSecret.
	DingTalk = "dingtalk"
	// OAuth2 is any OAuth2 client-credentials token endpoint (RFC 6749
	// §4.4) at TokenURL: AppID is the client_id, Secret the client_secret.
	OAuth2 = "oauth2"
)

// Providers lists the providers in the order the docs name them.
var Providers = []string{WeChat, WeCom, Feishu, DingTalk, OAuth2}

// The token APIs each provider offers (Config.TokenAPI); the first of each
// is its default.
const (
	// TokenAPIClassic is WeChat's GET /cgi-bin/token: every call mints a
	// new token and the previous one stays valid for five more minutes.
	TokenAPIClassic = "classic"
	// TokenAPIStable is WeChat's POST /cgi-bin/stable_token: the same token
	// while it is valid, and a force_refresh mode that revokes it at once.
	TokenAPIStable = "stable"
	// TokenAPITenant is Feishu's tenant_access_token of an internal app
	// (POST /open-apis/auth/v3/tenant_access_token/internal).
	TokenAPITenant = "tenant"
	// TokenAPIApp is Feishu's app_access_token of an internal app
	// (POST /open-apis/auth/v3/app_access_token/internal).
	TokenAPIApp = "app"
	// TokenAPIV1 is DingTalk's POST /v1.0/oauth2/accessToken on
	// api.dingtalk.com.
	TokenAPIV1 = "v1"
	// TokenAPILegacy is DingTalk's GET /gettoken on oapi.dingtalk.com.
	TokenAPILegacy = "legacy"
)

// The ways an OAuth2 client sends its credentials (Config.AuthStyle).
const (
	// AuthBasic sends client_id and client_secret in an HTTP Basic
	// Authorization header (RFC 6749 §2.3.1, which every server supports).
	AuthBasic = "basic"
	// AuthBody sends them as client_id and client_secret in the form body.
	AuthBody = "body"
)

// tokenAPIs lists each provider's token APIs, the default first; nil means
// the provider has no choice.
var tokenAPIs = map[string][]string{
	WeChat:   {TokenAPIClassic, TokenAPIStable},
	WeCom:    nil,
	Feishu:   {TokenAPITenant, TokenAPIApp},
	DingTalk: {TokenAPIV1, TokenAPILegacy},
	OAuth2:   nil,
}

// defaultAPIBases are the public hosts, by provider and token API.
var defaultAPIBases = map[string]string{
	WeChat:                          "https://api.weixin.qq.com",
	WeCom:                           "https://qyapi.weixin.qq.com",
	Feishu:                          "https://open.feishu.cn",
	DingTalk + "/" + TokenAPIV1:     "https://api.dingtalk.com",
	DingTalk + "/" + TokenAPILegacy: "https://oapi.dingtalk.com",
}

// Config names one upstream app and how to mint its access_token. Its
// String, GoString and LogValue methods mask Secret, so a Config can be
// printed or logged as a whole.
type Config struct {
	// Provider is WeChat, WeCom, Feishu, DingTalk or OAuth2.
	Provider string
	// TokenAPI picks among a provider's token APIs: TokenAPIClassic (the
	// default) or TokenAPIStable for WeChat, TokenAPITenant (the default)
	// or TokenAPIApp for Feishu, TokenAPIV1 (the default) or
	// TokenAPILegacy for DingTalk; empty for the others.
	TokenAPI string
	// APIBase is the scheme, host and optional path prefix of the
	// upstream (tests, proxies, Lark); empty means the provider's public
	// host. Not for OAuth2, which has TokenURL.
	APIBase string
	// TokenURL is the OAuth2 token endpoint; OAuth2 only, and required.
	TokenURL string
	// AppID is the appid, corpid, app_id, appKey or client_id.
	AppID string
	// Secret is the AppSecret, corpsecret, app_secret, appSecret or
	// client_secret.
	Secret string
	// Scope is the OAuth2 scope to ask for (space-separated); optional.
	Scope string
	// Audience is the OAuth2 audience parameter some servers want (Auth0,
	// Okta and the like); optional.
	Audience string
	// AuthStyle is how an OAuth2 client sends its credentials: AuthBasic
	// (the default) or AuthBody.
	AuthStyle string
}

// Validate reports the first problem with c, naming the field as the YAML
// config spells it (provider, token_api, api_base, token_url, appid,
// secret, scope, audience, auth_style). The error wraps ErrInvalidConfig
// and never contains the secret.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	apis, known := tokenAPIs[c.Provider]
	switch {
	case c.Provider == "":
		return bad("provider: missing, want %s", oneOf(Providers))
	case !known:
		return bad("provider %q: want %s", c.Provider, oneOf(Providers))
	case c.TokenAPI != "" && apis == nil:
		return bad("token_api %q: provider %q has no choice of token API", c.TokenAPI, c.Provider)
	case c.TokenAPI != "" && !contains(apis, c.TokenAPI):
		return bad("token_api %q: want %s for provider %q", c.TokenAPI, oneOf(apis), c.Provider)
	}
	if c.Provider == OAuth2 {
		if c.APIBase != "" {
			return bad("api_base: not for provider %q: set token_url", OAuth2)
		}
		if c.TokenURL == "" {
			return bad("token_url: missing: the OAuth2 token endpoint, e.g. https://auth.example.com/oauth2/token")
		}
		if msg := checkURL(c.TokenURL); msg != "" {
			return bad("token_url%s", msg)
		}
		switch c.AuthStyle {
		case "", AuthBasic, AuthBody:
		default:
			return bad("auth_style %q: want %s", c.AuthStyle, oneOf([]string{AuthBasic, AuthBody}))
		}
		if i := strings.IndexFunc(c.Scope, func(r rune) bool { return r != ' ' && notPrintable(r) }); i >= 0 {
			return bad("scope: has a control character at byte %d", i)
		}
		if i := strings.IndexFunc(c.Audience, notPrintable); i >= 0 {
			return bad("audience: has a space or control character at byte %d", i)
		}
	} else {
		switch {
		case c.TokenURL != "":
			return bad("token_url: only for provider %q; set api_base to change the host", OAuth2)
		case c.Scope != "":
			return bad("scope: only for provider %q", OAuth2)
		case c.Audience != "":
			return bad("audience: only for provider %q", OAuth2)
		case c.AuthStyle != "":
			return bad("auth_style: only for provider %q", OAuth2)
		}
		if c.APIBase != "" {
			if msg := checkURL(c.APIBase); msg != "" {
				return bad("api_base%s", msg)
			}
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

// checkURL returns what is wrong with an api_base or token_url, to follow
// the field's name (the URL as it may be shown, then why), or "".
func checkURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return ": not a URL"
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Sprintf(" %q: want an http or https URL", u.Redacted())
	case u.Host == "":
		return fmt.Sprintf(" %q: no host", u.Redacted())
	case u.User != nil:
		return fmt.Sprintf(" %q: user info is not allowed", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Sprintf(" %q: query and fragment are not allowed", u.Redacted())
	}
	return ""
}

func notPrintable(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func oneOf(list []string) string {
	quoted := make([]string, len(list))
	for i, v := range list {
		quoted[i] = fmt.Sprintf("%q", v)
	}
	if len(quoted) <= 1 {
		return strings.Join(quoted, "")
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}

// WithDefaults returns c with TokenAPI, APIBase and AuthStyle filled in.
func (c Config) WithDefaults() Config {
	if apis := tokenAPIs[c.Provider]; c.TokenAPI == "" && len(apis) > 0 {
		c.TokenAPI = apis[0]
	}
	if c.APIBase == "" && c.Provider != OAuth2 {
		c.APIBase = defaultAPIBases[c.Provider]
		if c.APIBase == "" {
			c.APIBase = defaultAPIBases[c.Provider+"/"+c.TokenAPI]
		}
	}
	if c.Provider == OAuth2 && c.AuthStyle == "" {
		c.AuthStyle = AuthBasic
	}
	return c
}

// String describes c with the secret masked.
func (c Config) String() string {
	s := fmt.Sprintf("{provider=%s token_api=%s api_base=%s appid=%s secret=%s", c.Provider, c.TokenAPI, c.APIBase, c.AppID, maskSecret(c.Secret))
	if c.Provider == OAuth2 {
		s += fmt.Sprintf(" token_url=%s scope=%q audience=%q auth_style=%s", c.TokenURL, c.Scope, c.Audience, c.AuthStyle)
	}
	return s + "}"
}

// GoString is String, so that %#v masks the secret as well.
func (c Config) GoString() string { return "upstream.Config" + c.String() }

// LogValue lets log/slog print c with the secret masked.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("provider", c.Provider),
		slog.String("token_api", c.TokenAPI),
		slog.String("api_base", c.APIBase),
		slog.String("appid", c.AppID),
		slog.String("secret", maskSecret(c.Secret)),
	}
	if c.Provider == OAuth2 {
		attrs = append(attrs, slog.String("token_url", c.TokenURL), slog.String("scope", c.Scope),
			slog.String("audience", c.Audience), slog.String("auth_style", c.AuthStyle))
	}
	return slog.GroupValue(attrs...)
}

func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}
