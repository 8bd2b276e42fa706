package wechat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/lockd/lockd/internal/upstream"
)

// TicketType names a JS-SDK ticket; see upstream.TicketType.
type TicketType = upstream.TicketType

// The ticket types WeChat and WeCom serve.
const (
	// TicketJSAPI is the jsapi_ticket that signs JS-SDK configurations
	// (WeChat: /cgi-bin/ticket/getticket?type=jsapi; WeCom: the corp's
	// /cgi-bin/get_jsapi_ticket).
	TicketJSAPI = upstream.TicketJSAPI
	// TicketWXCard is WeChat's card ticket (/cgi-bin/ticket/getticket?type=wx_card).
	TicketWXCard = upstream.TicketWXCard
	// TicketAgentConfig is WeCom's app ticket for wx.agentConfig
	// (/cgi-bin/ticket/get?type=agent_config).
	TicketAgentConfig = upstream.TicketAgentConfig
)

// ErrTicketType is returned by Ticket for a type the app's provider does
// not serve.
var ErrTicketType = upstream.ErrTicketType

// ErrTokenRejected is matched by every *Error from Ticket whose errcode
// says the access_token passed was not accepted (see TokenRejected): get a
// new token and ask again.
var ErrTokenRejected = upstream.ErrTokenRejected

// TokenRejected reports whether errcode, from an API other than the token
// endpoints, means the access_token passed was not accepted: 40001 (invalid
// or not the latest), 40014 (WeCom: invalid), 42001 (expired) or 41001
// (missing). From a token endpoint 40001 means a wrong secret instead.
func TokenRejected(errcode int) bool {
	switch errcode {
	case 40001, 40014, 42001, 41001:
		return true
	}
	return false
}

// TicketTypes returns the ticket types the client's provider serves.
func (c *Client) TicketTypes() []TicketType {
	if c.cfg.Provider == ProviderWeCom {
		return []TicketType{TicketJSAPI, TicketAgentConfig}
	}
	return []TicketType{TicketJSAPI, TicketWXCard}
}

// ticketPath returns the path and query of kind's endpoint, without the
// access_token.
func (c *Client) ticketPath(kind TicketType) (string, url.Values, error) {
	if !slices.Contains(c.TicketTypes(), kind) {
		return "", nil, fmt.Errorf("%w: %q for provider %s", ErrTicketType, kind, c.cfg.Provider)
	}
	switch {
	case c.cfg.Provider == ProviderWeChat:
		return "/cgi-bin/ticket/getticket", url.Values{"type": {string(kind)}}, nil
	case kind == TicketJSAPI:
		return "/cgi-bin/get_jsapi_ticket", url.Values{}, nil
	default:
		return "/cgi-bin/ticket/get", url.Values{"type": {string(kind)}}, nil
	}
}

// Ticket fetches a ticket of kind with accessToken. WeChat and WeCom hand
// out the current ticket again while it is valid. Failures are *Error
// values as for Mint; those whose errcode says accessToken was not accepted
// also match ErrTokenRejected. A kind the provider does not serve is
// ErrTicketType. No error mentions the secret or accessToken.
func (c *Client) Ticket(ctx context.Context, accessToken string, kind TicketType) (Token, error) {
	path, q, err := c.ticketPath(kind)
	if err != nil {
		return Token{}, err
	}
	endpoint := c.http.Endpoint(path)
	q.Set("access_token", accessToken)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.http.Base()+path+"?"+q.Encode(), nil)
	if err != nil {
		return Token{}, c.fail(ctx, endpoint, err, accessToken)
	}
	body, err := c.do(req, endpoint, accessToken)
	if err != nil {
		return Token{}, err
	}
	var r struct {
		Errcode   int    `json:"errcode"`
		Errmsg    string `json:"errmsg"`
		Ticket    string `json:"ticket"`
		ExpiresIn int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Token{}, c.http.BodyError(endpoint, http.StatusOK, fmt.Errorf("unparsable response: %w", err), accessToken)
	}
	if r.Errcode != 0 {
		e := c.errorOf(endpoint, r.Errcode, r.Errmsg, accessToken)
		if TokenRejected(r.Errcode) {
			e.Class, e.TokenRejected = ClassUnavailable, true
		}
		return Token{}, e
	}
	switch {
	case r.Ticket == "":
		return Token{}, c.http.BodyError(endpoint, http.StatusOK, errors.New("reply without ticket"))
	case r.ExpiresIn < 0 || time.Duration(r.ExpiresIn) > upstream.MaxExpiresIn/time.Second:
		return Token{}, c.http.BodyError(endpoint, http.StatusOK, fmt.Errorf("reply with expires_in %d", r.ExpiresIn))
	}
	return Token{AccessToken: r.Ticket, ExpiresIn: time.Duration(r.ExpiresIn) * time.Second}, nil
}

// Probe asks the upstream whether it accepts accessToken, by calling
// getcallbackip, which has no side effects. It returns true when the token
// is accepted, false when it is refused as invalid or expired (see
// TokenRejected), and an *Error when the answer says neither: the call
// failed, or the upstream answered another errcode (such as 48001 for an
// account without that API).
func (c *Client) Probe(ctx context.Context, accessToken string) (bool, error) {
	const path = "/cgi-bin/getcallbackip"
	endpoint := c.http.Endpoint(path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.http.Base()+path+"?"+url.Values{"access_token": {accessToken}}.Encode(), nil)
	if err != nil {
		return false, c.fail(ctx, endpoint, err, accessToken)
	}
	body, err := c.do(req, endpoint, accessToken)
	if err != nil {
		return false, err
	}
	var r struct {
		Errcode int    `json:"errcode"`
		Errmsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return false, c.http.BodyError(endpoint, http.StatusOK, fmt.Errorf("unparsable response: %w", err), accessToken)
	}
	switch {
	case r.Errcode == 0:
		return true, nil
	case TokenRejected(r.Errcode):
		return false, nil
	}
	return false, c.errorOf(endpoint, r.Errcode, r.Errmsg, accessToken)
}
