// Package oauth2 mints access tokens from any OAuth2 authorization server
// with the client credentials grant (RFC 6749 §4.4), through
// golang.org/x/oauth2/clientcredentials: a POST of
// grant_type=client_credentials to the token_url, the client's credentials
// in an HTTP Basic header (the default) or the form body, with an optional
// scope and audience. It is an upstream.Client for the token broker.
//
// The answer holds access_token, token_type and expires_in; errors are RFC
// 6749 §5.2 answers (HTTP 400 or 401 with error and error_description):
// invalid_request, invalid_client, invalid_grant, unauthorized_client,
// unsupported_grant_type and invalid_scope are the configuration's fault;
// an HTTP 429 or slow_down a rate limit; temporarily_unavailable,
// server_error and 5xx statuses transient. An answer without expires_in is
// refused: lockd could not tell when the token expires.
//
// Servers differ in whether a second request hands out a new token or the
// current one again, so the broker is told it cannot know
// (upstream.Unknown) and copes with either.
package oauth2

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	xoauth2 "golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/lockd/lockd/internal/upstream"
)

// credentialsErrors are the RFC 6749 §5.2 error codes that an operator
// must fix.
var credentialsErrors = map[string]bool{
	"invalid_request":        true,
	"invalid_client":         true,
	"invalid_grant":          true,
	"unauthorized_client":    true,
	"unsupported_grant_type": true,
	"invalid_scope":          true,
	"access_denied":          true,
}

// ClassOf returns the class of an error answer with RFC 6749's error code
// (possibly empty) and HTTP status.
func ClassOf(code string, status int) upstream.Class {
	switch {
	case credentialsErrors[code]:
		return upstream.ClassCredentials
	case code == "slow_down", status == http.StatusTooManyRequests:
		return upstream.ClassQuota
	case code == "temporarily_unavailable", code == "server_error":
		return upstream.ClassUnavailable
	}
	return upstream.ClassOfStatus(status)
}

// Client mints one OAuth2 client's tokens; it is safe for concurrent use
// and keeps no token.
type Client struct {
	cfg      upstream.Config
	cc       clientcredentials.Config
	http     *upstream.Caller
	endpoint string
}

// NewClient checks cfg (provider upstream.OAuth2) and returns its Client,
// calling through a copy of hc that never follows redirects (nil: a
// client with upstream.DefaultTimeout).
func NewClient(cfg upstream.Config, hc *http.Client) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Provider != upstream.OAuth2 {
		return nil, fmt.Errorf("%w: provider %q: package oauth2 mints for %q", upstream.ErrInvalidConfig, cfg.Provider, upstream.OAuth2)
	}
	cfg = cfg.WithDefaults()
	u, _ := url.Parse(cfg.TokenURL) // Validate parsed it
	origin := &url.URL{Scheme: u.Scheme, Host: u.Host}
	c := &Client{
		cfg:      cfg,
		http:     upstream.NewCaller(upstream.OAuth2, hc, origin, cfg.Secret),
		endpoint: u.Host + u.Path,
		cc: clientcredentials.Config{
			ClientID:     cfg.AppID,
			ClientSecret: cfg.Secret,
			TokenURL:     cfg.TokenURL,
			Scopes:       strings.Fields(cfg.Scope),
			AuthStyle:    xoauth2.AuthStyleInHeader,
		},
	}
	if cfg.AuthStyle == upstream.AuthBody {
		c.cc.AuthStyle = xoauth2.AuthStyleInParams
	}
	if cfg.Audience != "" {
		c.cc.EndpointParams = url.Values{"audience": {cfg.Audience}}
	}
	return c, nil
}

// Provider returns upstream.OAuth2.
func (c *Client) Provider() string { return upstream.OAuth2 }

// Endpoint returns the host and path of the token_url.
func (c *Client) Endpoint() string { return c.endpoint }

// String describes the client without its secret.
func (c *Client) String() string { return "oauth2.Client" + c.cfg.String() }

// Traits: whether a call hands out a new token is the server's choice
// (upstream.Unknown); no probe, no tickets.
func (c *Client) Traits() upstream.Traits { return upstream.Traits{FreshWindow: upstream.Unknown} }

// Mint asks the token_url for a token; force is ignored (every call may
// hand out a new token anyway).
func (c *Client) Mint(ctx context.Context, _ bool) (upstream.Token, error) {
	tctx, sent := upstream.TraceSent(ctx)
	tctx = context.WithValue(tctx, xoauth2.HTTPClient, c.http.HTTPClient())
	tok, err := c.cc.Token(tctx)
	answered := time.Now()
	if err != nil {
		var re *xoauth2.RetrieveError
		if errors.As(err, &re) {
			status := 0
			if re.Response != nil {
				status = re.Response.StatusCode
			}
			if re.ErrorCode == "" && status >= 200 && status < 300 {
				status = 0
			}
			return upstream.Token{}, &upstream.Error{Provider: upstream.OAuth2, Class: ClassOf(re.ErrorCode, status),
				Code: c.http.Redact(re.ErrorCode), Errmsg: c.http.Redact(re.ErrorDescription), HTTPStatus: status, Endpoint: c.endpoint}
		}
		var ue *url.Error
		if !errors.As(err, &ue) && ctx.Err() == nil && !strings.HasPrefix(err.Error(), "oauth2: cannot fetch token") {
			// An answer came but could not be used: not JSON, or no
			// access_token in it.
			return upstream.Token{}, c.http.BodyError(c.endpoint, http.StatusOK, err)
		}
		return upstream.Token{}, c.http.FailSent(ctx, c.endpoint, err, sent())
	}
	expiresIn := time.Duration(tok.ExpiresIn) * time.Second
	if tok.ExpiresIn == 0 && !tok.Expiry.IsZero() {
		// A form-encoded answer: x/oauth2 kept only the instant.
		expiresIn = tok.Expiry.Sub(answered).Round(time.Second)
	}
	switch {
	case tok.ExpiresIn == 0 && tok.Expiry.IsZero():
		return upstream.Token{}, c.http.BodyError(c.endpoint, http.StatusOK,
			errors.New("reply without expires_in: lockd cannot tell when the token expires"))
	case expiresIn < 0 || expiresIn > upstream.MaxExpiresIn:
		return upstream.Token{}, c.http.BodyError(c.endpoint, http.StatusOK, fmt.Errorf("reply with expires_in %d", tok.ExpiresIn))
	}
	return upstream.Token{AccessToken: tok.AccessToken, ExpiresIn: expiresIn}, nil
}

// Ticket is upstream.ErrTicketType: OAuth2 has no tickets.
func (c *Client) Ticket(context.Context, string, upstream.TicketType) (upstream.Token, error) {
	return upstream.Token{}, fmt.Errorf("%w: provider %s", upstream.ErrTicketType, upstream.OAuth2)
}

// Probe is upstream.ErrNoProbe: the broker checks a reported token by
// asking for a token instead.
func (c *Client) Probe(context.Context, string) (bool, error) {
	return false, upstream.ErrNoProbe
}
