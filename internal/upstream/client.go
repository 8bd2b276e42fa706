package upstream

import (
	"context"
	"fmt"
	"time"
)

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

// TicketType names a JS-SDK ticket, as the upstream's type parameter spells it.
type TicketType string

// The ticket types.
const (
	// TicketJSAPI is the jsapi_ticket that signs JS-SDK configurations
	// (WeChat: /cgi-bin/ticket/getticket?type=jsapi; WeCom: the corp's
	// /cgi-bin/get_jsapi_ticket).
	TicketJSAPI TicketType = "jsapi"
	// TicketWXCard is WeChat's card ticket (/cgi-bin/ticket/getticket?type=wx_card).
	TicketWXCard TicketType = "wx_card"
	// TicketAgentConfig is WeCom's app ticket for wx.agentConfig
	// (/cgi-bin/ticket/get?type=agent_config).
	TicketAgentConfig TicketType = "agent_config"
)

// MaxExpiresIn bounds the lifetime a provider may announce, so that a
// garbled value cannot overflow time.Duration; real tokens live hours.
const MaxExpiresIn = 366 * 24 * time.Hour

// Unknown is Traits.FreshWindow for a provider that may hand out a new
// token on any call, or may not: the broker tries for a fresher one ahead
// of expiry, and tries again, paced, when it gets the same one back.
const Unknown time.Duration = -1

// Traits say how a provider hands tokens out: what the broker needs to
// mint once per cycle, refresh ahead, and never serve an expired token.
type Traits struct {
	// FreshWindow says when a Mint hands out a new token rather than the
	// current one again: Unknown (negative) for a provider that mints a
	// new one on every call (WeChat classic, OAuth2 servers as a rule);
	// 0 for one that hands out the current token again until it expired
	// (WeCom); positive for one that hands out a new token only within
	// that span of the current one's expiry (WeChat stable: 5 min;
	// Feishu: 30 min).
	FreshWindow time.Duration
	// Renews is true when a Mint that hands out the current token again
	// also renews its life to the full lifetime (DingTalk): the token can
	// be refreshed ahead without being replaced.
	Renews bool
	// ForceRefresh is true when Mint(ctx, true) revokes the current token
	// and hands out a new one (WeChat stable), a call the provider limits.
	ForceRefresh bool
	// Probe is true when Probe can ask the provider whether it accepts a
	// token without side effects.
	Probe bool
	// TicketTypes lists the JS-SDK tickets Ticket fetches; none for most.
	TicketTypes []TicketType
}

// Client mints one app's tokens. Implementations are safe for concurrent
// use and keep no token: caching, single flight and retries are the
// broker's job. Every failure is an *Error, except when ctx ends first:
// then the error matches ctx.Err(). No error mentions the secret.
type Client interface {
	// Provider returns the provider of the app (WeChat, WeCom, ...).
	Provider() string
	// Endpoint returns the host and path Mint calls, e.g.
	// "api.weixin.qq.com/cgi-bin/token": safe to log.
	Endpoint() string
	// Traits says how the provider hands tokens out.
	Traits() Traits
	// Mint asks the upstream for an access_token. force matters only
	// with Traits.ForceRefresh: it revokes the current token and is
	// limited by the provider, so use it only for a token reported
	// invalid; elsewhere it is ignored.
	Mint(ctx context.Context, force bool) (Token, error)
	// Ticket fetches a ticket of kind with accessToken; a kind not in
	// Traits.TicketTypes is ErrTicketType. An answer saying accessToken
	// was not accepted matches ErrTokenRejected.
	Ticket(ctx context.Context, accessToken string, kind TicketType) (Token, error)
	// Probe reports whether the upstream accepts accessToken (true), or
	// refuses it as invalid or expired (false); an *Error when the answer
	// says neither, and ErrNoProbe without Traits.Probe.
	Probe(ctx context.Context, accessToken string) (bool, error)
}
