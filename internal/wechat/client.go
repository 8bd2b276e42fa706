package wechat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxResponseBytes bounds how much of a token response Mint reads; a longer
// body is an ErrUnavailable failure.
const MaxResponseBytes = 64 << 10

// DefaultTimeout is the overall timeout of the *http.Client NewClient makes
// when given nil.
const DefaultTimeout = 10 * time.Second

// Token is a freshly minted access_token.
type Token struct {
	// AccessToken is the token to pass to the upstream's APIs.
	AccessToken string
	// ExpiresIn is the lifetime the upstream announced, counted from the
	// moment the reply arrived.
	ExpiresIn time.Duration
}

// String shows the token's length and lifetime but not the token itself.
func (t Token) String() string {
	return fmt.Sprintf("{access_token=<%d bytes> expires_in=%s}", len(t.AccessToken), t.ExpiresIn)
}

// Client mints access_tokens for one app. It is safe for concurrent use; it
// keeps no token and does no caching or retrying, which is the caller's job.
type Client struct {
	cfg      Config
	hc       *http.Client
	url      string // full URL of the token endpoint, without the query
	endpoint string // host and path of url, for messages
}

// NewClient checks cfg and returns a Client that calls the upstream through
// a copy of hc that never follows redirects (a redirect would carry the
// secret to another URL). A nil hc means a client with DefaultTimeout.
func NewClient(cfg Config, hc *http.Client) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var own http.Client
	if hc != nil {
		own = *hc
	} else {
		own.Timeout = DefaultTimeout
	}
	own.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	path := "/cgi-bin/token"
	switch {
	case cfg.Provider == ProviderWeCom:
		path = "/cgi-bin/gettoken"
	case cfg.TokenAPI == TokenAPIStable:
		path = "/cgi-bin/stable_token"
	}
	base, _ := url.Parse(strings.TrimRight(cfg.APIBase, "/")) // Validate parsed it
	return &Client{
		cfg:      cfg,
		hc:       &own,
		url:      base.String() + path,
		endpoint: base.Host + base.Path + path,
	}, nil
}

// Endpoint returns the host and path Mint calls, e.g.
// "api.weixin.qq.com/cgi-bin/token": safe to log.
func (c *Client) Endpoint() string { return c.endpoint }

// ForceRefreshes reports whether Mint's forceRefresh has an effect, which it
// has only for the stable API.
func (c *Client) ForceRefreshes() bool { return c.cfg.TokenAPI == TokenAPIStable }

// String describes the client without its secret.
func (c *Client) String() string { return "wechat.Client" + c.cfg.String() }

// Mint asks the upstream for an access_token.
//
// forceRefresh matters only for the stable API (see ForceRefreshes): true
// sends force_refresh, which revokes the current token at once and is
// limited by WeChat (about 20 a day, 30 s apart), so use it only when the
// current token was reported invalid. The classic API returns a new token on
// every call anyway, and WeCom has no such switch, so there it is ignored
// rather than refused: a caller's refresh path works the same for all.
//
// Failures are *Error values matching ErrCredentials, ErrQuota or
// ErrUnavailable, except when ctx ends first: then the error matches
// ctx.Err() (context.Canceled or context.DeadlineExceeded) and no class.
// No error mentions the secret.
func (c *Client) Mint(ctx context.Context, forceRefresh bool) (Token, error) {
	req, err := c.newRequest(ctx, forceRefresh)
	if err != nil {
		return Token{}, c.fail(ctx, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Token{}, c.fail(ctx, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return Token{}, c.fail(ctx, fmt.Errorf("reading response: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		class := ClassUnavailable
		if resp.StatusCode == http.StatusTooManyRequests {
			class = ClassQuota
		}
		return Token{}, &Error{Class: class, HTTPStatus: resp.StatusCode, Endpoint: c.endpoint}
	}
	if len(body) > MaxResponseBytes {
		return Token{}, c.fail(ctx, fmt.Errorf("response longer than %d bytes", MaxResponseBytes))
	}
	return c.parse(body)
}

func (c *Client) newRequest(ctx context.Context, forceRefresh bool) (*http.Request, error) {
	switch {
	case c.cfg.Provider == ProviderWeCom:
		q := url.Values{"corpid": {c.cfg.AppID}, "corpsecret": {c.cfg.Secret}}
		return http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?"+q.Encode(), nil)
	case c.cfg.TokenAPI == TokenAPIStable:
		body, err := json.Marshal(stableRequest{
			GrantType:    "client_credential",
			AppID:        c.cfg.AppID,
			Secret:       c.cfg.Secret,
			ForceRefresh: forceRefresh,
		})
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	default:
		q := url.Values{"grant_type": {"client_credential"}, "appid": {c.cfg.AppID}, "secret": {c.cfg.Secret}}
		return http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?"+q.Encode(), nil)
	}
}

type stableRequest struct {
	GrantType    string `json:"grant_type"`
	AppID        string `json:"appid"`
	Secret       string `json:"secret"`
	ForceRefresh bool   `json:"force_refresh"`
}

type tokenResponse struct {
	Errcode     int    `json:"errcode"`
	Errmsg      string `json:"errmsg"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
}

// maxExpiresIn bounds the announced lifetime, so that a garbled value cannot
// overflow time.Duration; real tokens live 7200 s.
const maxExpiresIn = 366 * 24 * 3600

func (c *Client) parse(body []byte) (Token, error) {
	var r tokenResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return Token{}, &Error{Class: ClassUnavailable, Endpoint: c.endpoint,
			Err: c.scrub(fmt.Errorf("unparsable response: %w", err))}
	}
	if r.Errcode != 0 {
		return Token{}, &Error{Class: ClassOf(r.Errcode), Errcode: r.Errcode,
			Errmsg: c.redact(r.Errmsg), Endpoint: c.endpoint}
	}
	var problem string
	switch {
	case r.AccessToken == "":
		problem = "reply without access_token"
	case r.ExpiresIn <= 0 || r.ExpiresIn > maxExpiresIn:
		problem = fmt.Sprintf("reply with expires_in %d", r.ExpiresIn)
	default:
		return Token{AccessToken: r.AccessToken, ExpiresIn: time.Duration(r.ExpiresIn) * time.Second}, nil
	}
	return Token{}, &Error{Class: ClassUnavailable, Endpoint: c.endpoint, Err: errors.New(problem)}
}

// fail turns a failure to send a request or read its reply into an error
// without the URL or the secret.
func (c *Client) fail(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up; that is not the upstream's fault.
		return fmt.Errorf("wechat: %s: %w", c.endpoint, ctxErr)
	}
	cause := c.scrub(err)
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		// The http.Client's own Timeout fired, not the caller's deadline:
		// keep the text but not the identity, so that callers passing
		// context errors through do not mistake it for their own.
		cause = errors.New(cause.Error())
	}
	return &Error{Class: ClassUnavailable, Endpoint: c.endpoint, Err: cause}
}

// scrub peels *url.Error layers, whose messages hold the full URL and so the
// query's secret, off err. Should what remains still mention the secret or
// the URL (a *url.Error further down, an odd cause), it is flattened into a
// message that names the endpoint instead and masks the secret.
func (c *Client) scrub(err error) error {
	for {
		ue, ok := err.(*url.Error)
		if !ok {
			break
		}
		err = ue.Err
	}
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := c.redact(c.dropURLs(msg))
	var ue *url.Error
	if clean != msg || errors.As(err, &ue) {
		return errors.New(clean)
	}
	return err
}

// dropURLs replaces every occurrence of the endpoint's URL, with whatever
// query follows it, by the endpoint's host and path.
func (c *Client) dropURLs(msg string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, c.url)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		b.WriteString(c.endpoint)
		msg = msg[i+len(c.url):]
		if end := strings.IndexAny(msg, " \"'\n"); end >= 0 {
			msg = msg[end:]
		} else {
			msg = ""
		}
	}
}

// redact masks every spelling of the secret a message could carry.
func (c *Client) redact(s string) string {
	secret := c.cfg.Secret
	quoted, _ := json.Marshal(secret)
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), string(quoted[1 : len(quoted)-1])}
	for _, form := range forms {
		s = strings.ReplaceAll(s, form, "REDACTED")
	}
	return s
}
