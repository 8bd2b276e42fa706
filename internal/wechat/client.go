package wechat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lockd/lockd/internal/upstream"
)

// MaxResponseBytes bounds how much of a token response Mint reads; a longer
// body is an ErrUnavailable failure.
const MaxResponseBytes = upstream.MaxResponseBytes

// DefaultTimeout is the overall timeout of the *http.Client NewClient makes
// when given nil.
const DefaultTimeout = upstream.DefaultTimeout

// Token is an access_token (or a ticket) as the upstream handed it out; see
// upstream.Token.
type Token = upstream.Token

// Client mints access_tokens for one WeChat or WeCom app; it is an
// upstream.Client. It is safe for concurrent use; it keeps no token and
// does no caching or retrying, which is the caller's job.
type Client struct {
	cfg      Config
	http     *upstream.Caller
	url      string // full URL of the token endpoint, without the query
	endpoint string // host and path of url, for messages
}

// NewClient checks cfg (ProviderWeChat or ProviderWeCom) and returns a
// Client that calls the upstream through a copy of hc that never follows
// redirects (a redirect would carry the secret to another URL). A nil hc
// means a client with DefaultTimeout.
func NewClient(cfg Config, hc *http.Client) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider != ProviderWeChat && cfg.Provider != ProviderWeCom {
		return nil, fmt.Errorf("%w: provider %q: package wechat mints for %q and %q", ErrInvalidConfig, cfg.Provider, ProviderWeChat, ProviderWeCom)
	}
	cfg = cfg.WithDefaults()
	path := "/cgi-bin/token"
	switch {
	case cfg.Provider == ProviderWeCom:
		path = "/cgi-bin/gettoken"
	case cfg.TokenAPI == TokenAPIStable:
		path = "/cgi-bin/stable_token"
	}
	base, _ := url.Parse(cfg.APIBase) // Validate parsed it
	caller := upstream.NewCaller(cfg.Provider, hc, base, cfg.Secret)
	return &Client{
		cfg:      cfg,
		http:     caller,
		url:      caller.Base() + path,
		endpoint: caller.Endpoint(path),
	}, nil
}

// Endpoint returns the host and path Mint calls, e.g.
// "api.weixin.qq.com/cgi-bin/token": safe to log.
func (c *Client) Endpoint() string { return c.endpoint }

// ForceRefreshes reports whether Mint's forceRefresh has an effect, which it
// has only for the stable API.
func (c *Client) ForceRefreshes() bool { return c.cfg.TokenAPI == TokenAPIStable }

// StableWindow is how long before a stable token expires the stable API in
// normal mode starts handing out its successor.
const StableWindow = 5 * time.Minute

// FreshWindow says when Mint hands out a new token rather than the current
// one again: negative for the classic API, which mints a new token on every
// call; StableWindow for the stable API in normal mode, which hands out a
// new token only in the current one's last minutes; 0 for WeCom, which
// hands out the current token again until it has expired.
func (c *Client) FreshWindow() time.Duration {
	switch {
	case c.cfg.Provider == ProviderWeCom:
		return 0
	case c.cfg.TokenAPI == TokenAPIStable:
		return StableWindow
	}
	return upstream.Unknown
}

// Traits says how the client's API hands tokens out: see FreshWindow and
// ForceRefreshes; both providers can be probed and serve tickets.
func (c *Client) Traits() upstream.Traits {
	return upstream.Traits{
		FreshWindow:  c.FreshWindow(),
		ForceRefresh: c.ForceRefreshes(),
		Probe:        true,
		TicketTypes:  c.TicketTypes(),
	}
}

// Provider returns the provider of the client's app.
func (c *Client) Provider() string { return c.cfg.Provider }

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
		return Token{}, c.http.Fail(ctx, c.endpoint, err)
	}
	body, err := c.do(req, c.endpoint)
	if err != nil {
		return Token{}, err
	}
	return c.parse(body)
}

// do sends req and returns the body of a 200 reply, or an *Error naming
// endpoint, free of the URL and of the secret (and of the extra values,
// such as an access_token).
func (c *Client) do(req *http.Request, endpoint string, extra ...string) ([]byte, error) {
	r, err := c.http.Do(req, endpoint, extra...)
	if err != nil {
		return nil, err
	}
	if r.Status != http.StatusOK {
		return nil, c.http.StatusError(endpoint, r.Status)
	}
	return r.Body, nil
}

// fail names endpoint on an error without the secret or the extra values.
func (c *Client) fail(ctx context.Context, endpoint string, err error, extra ...string) error {
	return c.http.Fail(ctx, endpoint, err, extra...)
}

// errorOf is the *Error of an errcode answer.
func (c *Client) errorOf(endpoint string, errcode int, errmsg string, extra ...string) *Error {
	return &Error{Provider: c.cfg.Provider, Class: ClassOf(errcode), Errcode: errcode, Errmsg: c.http.Redact(errmsg, extra...), Endpoint: endpoint}
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

func (c *Client) parse(body []byte) (Token, error) {
	var r tokenResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return Token{}, c.http.BodyError(c.endpoint, http.StatusOK, fmt.Errorf("unparsable response: %w", err))
	}
	if r.Errcode != 0 {
		return Token{}, c.errorOf(c.endpoint, r.Errcode, r.Errmsg)
	}
	var problem string
	switch {
	case r.AccessToken == "":
		problem = "reply without access_token"
	case r.ExpiresIn < 0 || time.Duration(r.ExpiresIn) > upstream.MaxExpiresIn/time.Second:
		problem = fmt.Sprintf("reply with expires_in %d", r.ExpiresIn)
	default:
		return Token{AccessToken: r.AccessToken, ExpiresIn: time.Duration(r.ExpiresIn) * time.Second}, nil
	}
	return Token{}, c.http.BodyError(c.endpoint, http.StatusOK, errors.New(problem))
}
