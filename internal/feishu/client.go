// Package feishu mints the access tokens of Feishu and Lark internal apps
// (自建应用): the tenant_access_token (POST
// /open-apis/auth/v3/tenant_access_token/internal) or the app_access_token
// (.../app_access_token/internal), from the app_id and app_secret. It is
// an upstream.Client for the token broker.
//
// Feishu answers code, msg, the token and expire (seconds). A token lives
// two hours; a call while it has 30 minutes or more left hands out the same
// token again with the life it has left, a call in its last 30 minutes a
// new token, while the old one stays valid until it expires (FreshWindow).
// Errors come with HTTP 200 or 400 and a code: 10003 (invalid parameter)
// and 10014 (app secret invalid) are the credentials' fault, 99991400 a
// rate limit; every other code is taken as transient.
//
// Lark is the same API on open.larksuite.com: set the api_base.
package feishu

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

// FreshWindow is how long before a token expires Feishu starts handing out
// its successor.
const FreshWindow = 30 * time.Minute

// codeClasses lists the codes of the token endpoints this package knows;
// every other code is upstream.ClassUnavailable.
var codeClasses = map[int]upstream.Class{
	10003:    upstream.ClassCredentials, // invalid parameter: app_id unknown or malformed
	10014:    upstream.ClassCredentials, // app secret invalid
	99991400: upstream.ClassQuota,       // request trigger frequency limit
}

// ClassOf returns the class of a non-zero code from a token endpoint.
func ClassOf(code int) upstream.Class { return codeClasses[code] }

// TokenRejected reports whether code, from a Feishu API called with a
// token, says the token was not accepted: missing (99991661), invalid
// (99991663 tenant, 99991664 app, 99991668 user, 99991671 malformed) or
// expired (99991677). A client that gets one calls RefreshAccessToken.
func TokenRejected(code int) bool {
	switch code {
	case 99991661, 99991663, 99991664, 99991668, 99991671, 99991677:
		return true
	}
	return false
}

// Client mints one Feishu app's tokens; it is safe for concurrent use and
// keeps no token.
type Client struct {
	cfg      upstream.Config
	http     *upstream.Caller
	url      string
	endpoint string
	field    string // the token's field in the answer
}

// NewClient checks cfg (provider upstream.Feishu) and returns its Client,
// calling through a copy of hc that never follows redirects (nil: a
// client with upstream.DefaultTimeout).
func NewClient(cfg upstream.Config, hc *http.Client) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider != upstream.Feishu {
		return nil, fmt.Errorf("%w: provider %q: package feishu mints for %q", upstream.ErrInvalidConfig, cfg.Provider, upstream.Feishu)
	}
	cfg = cfg.WithDefaults()
	path, field := "/open-apis/auth/v3/tenant_access_token/internal", "tenant_access_token"
	if cfg.TokenAPI == upstream.TokenAPIApp {
		path, field = "/open-apis/auth/v3/app_access_token/internal", "app_access_token"
	}
	base, _ := url.Parse(cfg.APIBase) // Validate parsed it
	caller := upstream.NewCaller(upstream.Feishu, hc, base, cfg.Secret)
	return &Client{cfg: cfg, http: caller, url: caller.Base() + path, endpoint: caller.Endpoint(path), field: field}, nil
}

// Provider returns upstream.Feishu.
func (c *Client) Provider() string { return upstream.Feishu }

// Endpoint returns the host and path Mint calls.
func (c *Client) Endpoint() string { return c.endpoint }

// String describes the client without its secret.
func (c *Client) String() string { return "feishu.Client" + c.cfg.String() }

// Traits: a new token only in the current one's last FreshWindow; no probe,
// no tickets.
func (c *Client) Traits() upstream.Traits { return upstream.Traits{FreshWindow: FreshWindow} }

// Mint asks Feishu for the app's token; force is ignored (Feishu has no
// way to revoke a token early).
func (c *Client) Mint(ctx context.Context, _ bool) (upstream.Token, error) {
	body, _ := json.Marshal(map[string]string{"app_id": c.cfg.AppID, "app_secret": c.cfg.Secret})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return upstream.Token{}, c.http.Fail(ctx, c.endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	r, err := c.http.Do(req, c.endpoint)
	if err != nil {
		return upstream.Token{}, err
	}
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &answer); err != nil {
		if r.Status != http.StatusOK {
			return upstream.Token{}, c.http.StatusError(c.endpoint, r.Status)
		}
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, fmt.Errorf("unparsable response: %w", err))
	}
	var code int
	var msg, token string
	var expire int64
	_ = json.Unmarshal(answer["code"], &code)
	_ = json.Unmarshal(answer["msg"], &msg)
	_ = json.Unmarshal(answer[c.field], &token)
	_ = json.Unmarshal(answer["expire"], &expire)
	status := r.Status
	if status == http.StatusOK {
		status = 0
	}
	switch {
	case code != 0:
		return upstream.Token{}, &upstream.Error{Provider: upstream.Feishu, Class: ClassOf(code), Errcode: code,
			Errmsg: c.http.Redact(msg), HTTPStatus: status, Endpoint: c.endpoint}
	case r.Status != http.StatusOK:
		return upstream.Token{}, c.http.StatusError(c.endpoint, r.Status)
	case token == "":
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, errors.New("reply without "+c.field))
	case expire < 0 || time.Duration(expire) > upstream.MaxExpiresIn/time.Second:
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, fmt.Errorf("reply with expire %d", expire))
	}
	return upstream.Token{AccessToken: token, ExpiresIn: time.Duration(expire) * time.Second}, nil
}

// Ticket is upstream.ErrTicketType: lockd serves no Feishu tickets.
func (c *Client) Ticket(context.Context, string, upstream.TicketType) (upstream.Token, error) {
	return upstream.Token{}, fmt.Errorf("%w: provider %s", upstream.ErrTicketType, upstream.Feishu)
}

// Probe is upstream.ErrNoProbe: the broker checks a reported token by
// asking for the current one instead.
func (c *Client) Probe(context.Context, string) (bool, error) {
	return false, upstream.ErrNoProbe
}
