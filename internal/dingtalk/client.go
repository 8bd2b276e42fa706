// Package dingtalk mints the access tokens of DingTalk internal apps
// (企业内部应用) from their appKey and appSecret, through the current API
// (POST /v1.0/oauth2/accessToken on api.dingtalk.com, answering
// accessToken and expireIn) or the legacy one (GET /gettoken on
// oapi.dingtalk.com, answering errcode, access_token and expires_in). It is
// an upstream.Client for the token broker.
//
// A token lives two hours. A call while it is valid hands out the same
// token again and renews its life to the full two hours (Traits.Renews);
// after it expired, a call hands out a new one. So the broker refreshes a
// DingTalk token ahead of expiry without replacing it, and callers never
// wait at its expiry.
//
// The current API answers errors with an HTTP error status and a textual
// code: invalidClientIdOrSecret (and the Forbidden.* codes) are the
// credentials' fault, Throttling.* a rate limit. The legacy API answers an
// errcode: 40001, 40089 and 40096 (bad appKey or appSecret) and 60020 (IP
// not allowed) are the credentials' fault, 90018 a rate limit; other codes
// are taken as transient.
package dingtalk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lockd/lockd/internal/upstream"
)

// errcodeClasses lists the legacy errcodes this package knows.
var errcodeClasses = map[int]upstream.Class{
	40001: upstream.ClassCredentials, // wrong secret
	40089: upstream.ClassCredentials, // invalid corpid or corpsecret (appkey or appsecret)
	40096: upstream.ClassCredentials, // invalid appkey or appsecret
	60020: upstream.ClassCredentials, // caller IP not in the whitelist
	90018: upstream.ClassQuota,       // throttled
}

// ClassOf returns the class of an answer with errcode (legacy API) or code
// (current API) and HTTP status: known codes first, then the status.
func ClassOf(errcode int, code string, status int) upstream.Class {
	switch {
	case errcode != 0:
		return errcodeClasses[errcode]
	case code == "invalidClientIdOrSecret", strings.HasPrefix(code, "Forbidden"):
		return upstream.ClassCredentials
	case strings.HasPrefix(code, "Throttling"):
		return upstream.ClassQuota
	}
	return upstream.ClassOfStatus(status)
}

// Client mints one DingTalk app's tokens; it is safe for concurrent use
// and keeps no token.
type Client struct {
	cfg      upstream.Config
	http     *upstream.Caller
	url      string
	endpoint string
}

// NewClient checks cfg (provider upstream.DingTalk) and returns its Client,
// calling through a copy of hc that never follows redirects (nil: a
// client with upstream.DefaultTimeout).
func NewClient(cfg upstream.Config, hc *http.Client) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider != upstream.DingTalk {
		return nil, fmt.Errorf("%w: provider %q: package dingtalk mints for %q", upstream.ErrInvalidConfig, cfg.Provider, upstream.DingTalk)
	}
	cfg = cfg.WithDefaults()
	path := "/v1.0/oauth2/accessToken"
	if cfg.TokenAPI == upstream.TokenAPILegacy {
		path = "/gettoken"
	}
	base, _ := url.Parse(cfg.APIBase) // Validate parsed it
	caller := upstream.NewCaller(upstream.DingTalk, hc, base, cfg.Secret)
	return &Client{cfg: cfg, http: caller, url: caller.Base() + path, endpoint: caller.Endpoint(path)}, nil
}

// Provider returns upstream.DingTalk.
func (c *Client) Provider() string { return upstream.DingTalk }

// Endpoint returns the host and path Mint calls.
func (c *Client) Endpoint() string { return c.endpoint }

// String describes the client without its secret.
func (c *Client) String() string { return "dingtalk.Client" + c.cfg.String() }

// Traits: the same token until it expired, renewed by every call; no probe,
// no tickets.
func (c *Client) Traits() upstream.Traits { return upstream.Traits{FreshWindow: 0, Renews: true} }

// Mint asks DingTalk for the app's token; force is ignored.
func (c *Client) Mint(ctx context.Context, _ bool) (upstream.Token, error) {
	var req *http.Request
	var err error
	if c.cfg.TokenAPI == upstream.TokenAPILegacy {
		q := url.Values{"appkey": {c.cfg.AppID}, "appsecret": {c.cfg.Secret}}
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?"+q.Encode(), nil)
	} else {
		body, _ := json.Marshal(map[string]string{"appKey": c.cfg.AppID, "appSecret": c.cfg.Secret})
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return upstream.Token{}, c.http.Fail(ctx, c.endpoint, err)
	}
	r, err := c.http.Do(req, c.endpoint)
	if err != nil {
		return upstream.Token{}, err
	}
	var a struct {
		// The current API.
		AccessToken string `json:"accessToken"`
		ExpireIn    int64  `json:"expireIn"`
		Code        string `json:"code"`
		Message     string `json:"message"`
		// The legacy API.
		Errcode      int    `json:"errcode"`
		Errmsg       string `json:"errmsg"`
		LegacyToken  string `json:"access_token"`
		LegacyExpiry int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil {
		if r.Status != http.StatusOK {
			return upstream.Token{}, c.http.StatusError(c.endpoint, r.Status)
		}
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, fmt.Errorf("unparsable response: %w", err))
	}
	status := r.Status
	if status == http.StatusOK {
		status = 0
	}
	if a.Errcode != 0 || a.Code != "" {
		msg := a.Message
		if a.Errcode != 0 {
			msg = a.Errmsg
		}
		return upstream.Token{}, &upstream.Error{Provider: upstream.DingTalk, Class: ClassOf(a.Errcode, a.Code, r.Status),
			Errcode: a.Errcode, Code: a.Code, Errmsg: c.http.Redact(msg), HTTPStatus: status, Endpoint: c.endpoint}
	}
	if r.Status != http.StatusOK {
		return upstream.Token{}, c.http.StatusError(c.endpoint, r.Status)
	}
	token, expire := a.AccessToken, a.ExpireIn
	if c.cfg.TokenAPI == upstream.TokenAPILegacy {
		token, expire = a.LegacyToken, a.LegacyExpiry
	}
	switch {
	case token == "":
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, errors.New("reply without a token"))
	case expire < 0 || time.Duration(expire) > upstream.MaxExpiresIn/time.Second:
		return upstream.Token{}, c.http.BodyError(c.endpoint, r.Status, fmt.Errorf("reply with a lifetime of %d s", expire))
	}
	return upstream.Token{AccessToken: token, ExpiresIn: time.Duration(expire) * time.Second}, nil
}

// Ticket is upstream.ErrTicketType: lockd serves no DingTalk tickets.
func (c *Client) Ticket(context.Context, string, upstream.TicketType) (upstream.Token, error) {
	return upstream.Token{}, fmt.Errorf("%w: provider %s", upstream.ErrTicketType, upstream.DingTalk)
}

// Probe is upstream.ErrNoProbe: the broker checks a reported token by
// asking for the current one instead.
func (c *Client) Probe(context.Context, string) (bool, error) {
	return false, upstream.ErrNoProbe
}
