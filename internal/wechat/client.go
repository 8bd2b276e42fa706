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

// Token is an access_token (or a ticket) as the upstream handed it out.
type Token struct {
	// AccessToken is the token to pass to the upstream's APIs (for
	// Ticket, the ticket).
	AccessToken string
	// ExpiresIn is the lifetime the upstream announced in whole seconds,
	// counted from when it answered. Zero means the value is in its last
	// second: ask again in a second for a new one.
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
	base     string // scheme, host and path prefix of every endpoint
	host     string // host and path prefix of base, for messages
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
		base:     base.String(),
		host:     base.Host + base.Path,
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
	return -1
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
		return Token{}, c.fail(ctx, c.endpoint, err)
	}
	body, err := c.do(ctx, req, c.endpoint)
	if err != nil {
		return Token{}, err
	}
	return c.parse(body)
}

// do sends req and returns the body of a 200 reply, or an *Error naming
// endpoint, free of the URL and of secret (and of the extra values, such
// as an access_token).
func (c *Client) do(ctx context.Context, req *http.Request, endpoint string, extra ...string) ([]byte, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.fail(ctx, endpoint, err, extra...)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, c.fail(ctx, endpoint, fmt.Errorf("reading response: %w", err), extra...)
	}
	if resp.StatusCode != http.StatusOK {
		class := ClassUnavailable
		if resp.StatusCode == http.StatusTooManyRequests {
			class = ClassQuota
		}
		return nil, &Error{Class: class, HTTPStatus: resp.StatusCode, Endpoint: endpoint}
	}
	if len(body) > MaxResponseBytes {
		return nil, c.fail(ctx, endpoint, fmt.Errorf("response longer than %d bytes", MaxResponseBytes), extra...)
	}
	return body, nil
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
	case r.ExpiresIn < 0 || r.ExpiresIn > maxExpiresIn:
		problem = fmt.Sprintf("reply with expires_in %d", r.ExpiresIn)
	default:
		return Token{AccessToken: r.AccessToken, ExpiresIn: time.Duration(r.ExpiresIn) * time.Second}, nil
	}
	return Token{}, &Error{Class: ClassUnavailable, Endpoint: c.endpoint, Err: errors.New(problem)}
}

// fail turns a failure to send a request to endpoint or read its reply into
// an error without the URL, the secret or the extra values.
func (c *Client) fail(ctx context.Context, endpoint string, err error, extra ...string) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The caller gave up; that is not the upstream's fault.
		return fmt.Errorf("wechat: %s: %w", endpoint, ctxErr)
	}
	cause := c.scrub(err, extra...)
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		// The http.Client's own Timeout fired, not the caller's deadline:
		// keep the text but not the identity, so that callers passing
		// context errors through do not mistake it for their own.
		cause = errors.New(cause.Error())
	}
	return &Error{Class: ClassUnavailable, Endpoint: endpoint, Err: cause, Transport: true}
}

// scrub peels *url.Error layers, whose messages hold the full URL and so the
// query's secret or access_token, off err. Should what remains still mention
// the secret, an extra value or a URL (a *url.Error further down, an odd
// cause), it is flattened into a message that names the endpoint instead
// and masks them.
func (c *Client) scrub(err error, extra ...string) error {
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
	clean := c.redact(c.dropURLs(msg), extra...)
	var ue *url.Error
	if clean != msg || errors.As(err, &ue) {
		return errors.New(clean)
	}
	return err
}

// dropURLs replaces every URL of the upstream in msg, with whatever query
// follows it, by its host and path.
func (c *Client) dropURLs(msg string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, c.base)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		msg = msg[i+len(c.base):]
		end := strings.IndexAny(msg, " \"'\n")
		if end < 0 {
			end = len(msg)
		}
		path := msg[:end]
		if q := strings.IndexAny(path, "?#"); q >= 0 {
			path = path[:q]
		}
		b.WriteString(c.host + path)
		msg = msg[end:]
	}
}

// redact masks every spelling of the secret, and of the extra values, a
// message could carry.
func (c *Client) redact(s string, extra ...string) string {
	for _, v := range append([]string{c.cfg.Secret}, extra...) {
		if v == "" {
			continue
		}
		quoted, _ := json.Marshal(v)
		forms := []string{v, url.QueryEscape(v), url.PathEscape(v), string(quoted[1 : len(quoted)-1])}
		for _, form := range forms {
			s = strings.ReplaceAll(s, form, "REDACTED")
		}
	}
	return s
}
