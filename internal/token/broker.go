// Package token is lockd's access_token broker: one access_token per
// configured app, and the app's JS-SDK tickets, cached in Redis and shared
// by every lockd replica, so that however many callers ask at once the
// upstream is called once per refresh. The upstream is any provider behind
// package upstream's seam (WeChat, WeCom, Feishu/Lark, DingTalk, OAuth2
// client credentials); what differs between them is told by their Traits,
// and every guarantee below holds for each.
//
// # How a token is served
//
// Get reads the cached token (one round trip, shared by every concurrent
// caller of the process) and returns it while it has more than a safety
// margin left, or, when the upstream has nothing fresher to give yet (WeCom
// and the stable API hand out the current token again), while it is valid.
// When it is missing or expiring, the replica takes lockd's own lock on the
// app (a short redislock lease, kept alive while the mint lasts), reads the
// cache again, calls the upstream, stores the token and publishes a notice.
// Replicas that did not get the lock wait for that notice (or re-check every
// Options.Recheck, in case it is lost) and read the new token: N replicas ×
// M callers, one mint.
//
// A token's expiry is worked out from expires_in, which is whole seconds
// and, for a token handed out again, rounded: the broker keeps the earliest
// and the latest moment it may expire, never serves it past the earliest,
// and asks an upstream that hands out the same token again for a new one
// only after the latest, so that each expiry costs one upstream call. A
// token handed out again with an earliest expiry past the latest one known
// was renewed (DingTalk does so on every call; so may a proxy, or another
// system calling the same upstream): its new life is believed, and from
// then on it is renewed ahead. Whatever the upstream answers, the calls of
// one value's endpoint are paced (Options.FetchInterval apart) and bounded
// per hour (Options.FetchesPerHour) fleet-wide, so that no answer drives the
// fleet into a loop.
//
// Each stored value carries a version, above every version stored before
// and above any the storing replica heard of. A replica that reads an older
// version than it knew of (Redis restarted from a snapshot, failed over to
// a lagging replica, was restored, or lost its data) never serves it: it
// puts back the newest value it remembers while that is good, or else has
// it replaced by one mint. Watch sends values in version order.
//
// Refresh is a compare-and-refresh: a caller reports the token the upstream
// rejected. If the cache holds another one, that is the answer and the
// upstream is not called. If it holds the reported one, one replica checks
// the report before minting: the stable API is asked in normal mode first
// (another system sharing the appid may have replaced the token), then the
// token is probed (WeChat and WeCom: getcallbackip); only a token the
// upstream refuses is replaced (the stable API with force_refresh, within
// WeChat's limits). An upstream that cannot be probed is asked for its
// current token instead: one it hands out again is one it accepts. The
// fleet shares the verdict: that a token is valid for a second after the
// upstream first said so, doubling with each check that says so again up
// to Options.VerifyInterval, so that a client reporting a valid token in a
// loop costs one check per VerifyInterval; the verdict answers only the
// clients whose reports it checked, and never a refusal the broker met
// itself (a ticket call), which are checked again at once. Reports
// that may mint are limited per calling client (Caller.RefreshesPerHour,
// each distinct token charged once) and per app (Options.AppRefreshesPerHour),
// and every mint is logged with the client that caused it.
//
// Ticket serves JS-SDK tickets the same way, fetched with the app's token
// and renewed ahead like it (whether a ticket asked for again is a new one
// differs by provider: a ticket handed out again is asked for once more
// halfway to its expiry).
//
// RunRefresher renews each app's token and tickets ahead of expiry, with
// jitter, on whichever replica's timer fires first (the lock again decides),
// so that callers normally never wait on the upstream. Values nobody asked
// for within Options.IdleAfter are left to expire. A failed renewal keeps
// the last good value in service until it expires.
//
// # Failures
//
// A failed mint is recorded in Redis for every replica minting with the
// same credentials (a fingerprint of them, never the secret, scopes the
// record): until it expires, callers that need a new token get the recorded
// error and no such replica calls the upstream. Holds grow exponentially
// with failures in a row, with jitter, up to Options.MaxHold; a spent daily
// quota (45009) holds until WeChat's day turns, probing every
// Options.QuotaProbe. A call that got no answer after its request was sent
// counts in the day's mints: the upstream may have minted. Errors are *Error values wrapping the upstream's
// *upstream.Error. When Redis cannot be reached the broker serves the last
// token it read while it is valid, unless a notice announced a newer one,
// and mints nothing, so that no replica mints behind the others' backs.
//
// # Redis keys
//
// With the default prefix "lockd", for an app whose account is ID
// ("wechat:classic:<appid>:<fp>", "wechat:stable:<appid>:<fp>" or
// "wecom:<corpid>:<fp>", where fp is a keyed digest of the secret, so that
// a deployment with another secret never reads the account's token):
//
//	lockd:token:{ID}                        hash: the access_token, expire_ms, hi_ms, renew_ms,
//	                                        lifetime_ms, written_ms, cause, gen, ver; expires after the token
//	lockd:token:{ID}:ticket:<type>          the same for a ticket
//	…:failure:<fingerprint>                 the last failed mint with these credentials (no secret)
//	…:demand                                present while someone asked within IdleAfter
//	…:mints:YYYY-MM-DD                      new tokens (tickets) that day (Asia/Shanghai); kept 8 days
//	…:fetch-gate                            present while the last upstream call is under FetchInterval old
//	…:fetches                               upstream calls in the hour since the first
//	lockd:token:{ID}:verdict                the fleet's verdict on the last reported token (a digest of it)
//	lockd:token:{ID}:forces:YYYY-MM-DD      stable force_refresh calls that day; kept 8 days
//	lockd:token:{ID}:force-gate             present while the last force_refresh is under 30 s old
//	lockd:token:{ID}:reports:<window>       mints caused by reports in the hour
//	lockd:token:{ID}:client:<name>:<window> reports a client made mint-worthy in the hour
//	lockd:token:{ID}:charged:<name>:<hash>  that client was charged for that token
//	lockd:token:{ID}:notice                 pub/sub channel: a value was stored (with its version) or a mint failed
//	lockd:token:lock:{ID}…                  lockd's lock on the app (package redislock)
//
// No key or value holds a secret or a reported token; every key expires.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/upstream"
)

var (
	// ErrUnknownApp is returned for an app name that is not configured.
	ErrUnknownApp = errors.New("token: unknown app")
	// ErrRefreshLimited is wrapped by the *Error Refresh returns when the
	// reported token can be replaced only by a stable force_refresh and
	// WeChat's limits on those (a daily number, a minimum interval) do not
	// allow one now.
	ErrRefreshLimited = errors.New("token: force_refresh limit reached")
	// ErrAppRefreshLimited is wrapped by the *Error Refresh returns when
	// reports of rejected tokens caused Options.AppRefreshesPerHour mints
	// of the app within the hour.
	ErrAppRefreshLimited = errors.New("token: the app's refresh limit is reached")
	// ErrClientLimited is wrapped by the *Error Refresh returns when the
	// calling client reported Caller.RefreshesPerHour current tokens
	// within the hour.
	ErrClientLimited = errors.New("token: the client's refresh limit is reached")
	// ErrFetchLimited is wrapped by the *Error a call gets when the value
	// needs the upstream and the fleet called it Options.FetchesPerHour
	// times within the hour: whatever the upstream answers, it is not
	// called in a loop.
	ErrFetchLimited = errors.New("token: the upstream was called as often as allowed this hour")
	// ErrTicketType is returned by Ticket for a ticket type the app's
	// provider does not serve.
	ErrTicketType = errors.New("token: ticket type not served for this app")
	// ErrTimeout is returned when a call waited Options.MaxWait for
	// another replica's mint without seeing a token.
	ErrTimeout = errors.New("token: timed out waiting for the token to be minted")
	// ErrClosed is returned by calls on a closed Broker.
	ErrClosed = errors.New("token: broker closed")
)

// DefaultRefreshesPerHour is the number of distinct current tokens a client
// whose Caller.RefreshesPerHour is 0 may report per hour. Each such report
// is checked with the upstream before it mints, so a client that loops on a
// valid token causes no mint at all; against an upstream that keeps
// rejecting tokens, one client causes at most this many mints an hour.
const DefaultRefreshesPerHour = 6

// DefaultFetchesPerHour is Options.FetchesPerHour's default.
const DefaultFetchesPerHour = 120

// Token is an access_token (or ticket) as the broker hands it out.
type Token struct {
	// AccessToken is the token to send to the upstream's APIs (for
	// Ticket, the ticket).
	AccessToken string
	// ExpireTime is the earliest the upstream may stop accepting it, by
	// Redis's clock.
	ExpireTime time.Time

	ver int64 // the version the fleet stored it under; 0 when unknown
}

// String shows the token's length and expiry, not the token.
func (t Token) String() string {
	return fmt.Sprintf("{access_token=<%d bytes> expire_time=%s}", len(t.AccessToken), t.ExpireTime.Format(time.RFC3339))
}

// Error is a failure to provide an app's token, with the upstream's error
// and when the fleet will try again. It never holds a secret.
type Error struct {
	// App is the app's name.
	App string
	// Err is the cause: the upstream's *upstream.Error, or an error wrapping
	// ErrRefreshLimited, ErrAppRefreshLimited or ErrClientLimited (and
	// the upstream's error, when it refused).
	Err error
	// RetryAfter is how long no replica will call the upstream for the
	// app (or the limit lasts); zero when unknown.
	RetryAfter time.Duration
	// Recorded is true when the failure is one an earlier attempt
	// recorded in Redis, rather than this call's own.
	Recorded bool
}

// Error describes the failure without secrets.
func (e *Error) Error() string {
	msg := fmt.Sprintf("token: app %q: %v", e.App, e.Err)
	var notes []string
	if e.Recorded {
		notes = append(notes, "recorded by an earlier attempt")
	}
	if e.RetryAfter > 0 {
		notes = append(notes, "next attempt in "+e.RetryAfter.Round(100*time.Millisecond).String())
	}
	if len(notes) > 0 {
		msg += " (" + strings.Join(notes, "; ") + ")"
	}
	return msg
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Cause says why a token was minted.
type Cause uint8

// The causes of a mint.
const (
	// CauseDemand is a mint for a caller that found no token with enough
	// life left.
	CauseDemand Cause = iota + 1
	// CauseInvalid is a mint for a caller that reported the cached token
	// invalid, and the upstream agreed.
	CauseInvalid
	// CauseAhead is RunRefresher renewing a token ahead of its expiry.
	CauseAhead
)

// String returns "demand", "invalid" or "ahead".
func (c Cause) String() string {
	switch c {
	case CauseDemand:
		return "demand"
	case CauseInvalid:
		return "invalid"
	case CauseAhead:
		return "ahead"
	}
	return "unknown"
}

// Broker serves the access_tokens and tickets of a fixed set of apps. It is
// safe for concurrent use; every replica builds its own on the shared Redis.
type Broker struct {
	rdb     redis.UniversalClient
	opts    Options
	log     *slog.Logger
	locks   *redislock.Client
	publish string
	apps    map[string]*app
	notify  *notifier

	ctx       context.Context // ends when the Broker is closed
	cancel    context.CancelFunc
	closeOnce sync.Once

	leadMu  sync.Mutex
	closing bool
	leads   sync.WaitGroup // mints under way
}

// New returns a Broker serving apps on rdb, which may be a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient. It checks every app's
// name and upstream configuration, refuses two apps of one upstream account
// (they would share, or with the classic API invalidate, each other's
// tokens), and subscribes to the apps' notices in the background.
func New(rdb redis.UniversalClient, apps []App, opts Options) (*Broker, error) {
	opts = opts.withDefaults()
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := opts.Sharded || cluster
	b := &Broker{
		rdb:     rdb,
		opts:    opts,
		log:     opts.Logger,
		publish: "PUBLISH",
		apps:    map[string]*app{},
	}
	if sharded {
		b.publish = "SPUBLISH"
	}
	accounts := map[string]string{}
	for _, a := range apps {
		if err := validName(a.Name); err != nil {
			return nil, err
		}
		if b.apps[a.Name] != nil {
			return nil, fmt.Errorf("token: app %q configured twice", a.Name)
		}
		client, err := newClient(a.Upstream, opts.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("token: app %q: %w", a.Name, err)
		}
		id := Identity(a.Upstream)
		if other, dup := accounts[account(a.Upstream)]; dup {
			return nil, fmt.Errorf("token: apps %q and %q are the same upstream account (%s); configure it once", other, a.Name, account(a.Upstream))
		}
		accounts[account(a.Upstream)] = a.Name
		b.apps[a.Name] = newApp(b, a, client, id)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.locks = redislock.New(rdb, redislock.Options{Prefix: opts.Prefix + ":token:lock", Sharded: sharded})
	b.notify = startNotifier(rdb, sharded, b.apps)
	return b, nil
}

func validName(name string) error {
	switch {
	case name == "":
		return errors.New("token: app name must not be empty")
	case len(name) > 128:
		return fmt.Errorf("token: app name %q is longer than 128 bytes", name)
	case strings.ContainsAny(name, "{}"):
		return fmt.Errorf("token: app name %q must not hold braces", name)
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("token: app name %q must be printable", name)
	}
	return redislock.ValidateKey(name)
}

// Apps returns the names of the apps the broker serves, sorted.
func (b *Broker) Apps() []string {
	names := make([]string, 0, len(b.apps))
	for n := range b.apps {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close ends calls still waiting with ErrClosed, lets the mints under way
// finish, store their token and release their lock (bounded by the mint's
// own time limit), then stops the broker's subscriptions. It does not close
// rdb.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.leadMu.Lock()
		b.closing = true
		b.leadMu.Unlock()
		b.cancel()
		done := make(chan struct{})
		go func() {
			b.leads.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(b.leadTimeout() + time.Second):
			b.log.Warn("token: closing with mints still under way")
		}
		b.notify.close()
		_ = b.locks.Close()
	})
	return nil
}

// startLead registers a mint under way, unless the broker is closing.
func (b *Broker) startLead() bool {
	b.leadMu.Lock()
	defer b.leadMu.Unlock()
	if b.closing {
		return false
	}
	b.leads.Add(1)
	return true
}

// leadTimeout bounds a mint under the lock: a stable report asks in normal
// mode, probes and forces, one upstream call each.
func (b *Broker) leadTimeout() time.Duration { return 3*b.opts.MintTimeout + 5*time.Second }

func (b *Broker) app(name string) (*app, error) {
	a := b.apps[name]
	if a == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownApp, name)
	}
	return a, nil
}

// Get returns the app's token: the cached one while it has more than the
// margin left, else a new one minted by exactly one replica, waited for up
// to ctx's deadline and Options.MaxWait. caller is logged with the mint it
// causes.
func (b *Broker) Get(ctx context.Context, app string, caller Caller) (Token, error) {
	a, err := b.app(app)
	if err != nil {
		return Token{}, err
	}
	return a.token.join(ctx, want{cause: CauseDemand, caller: caller})
}

// Refresh reports that the upstream rejected invalidToken (errcode 40001,
// 42001, or WeCom's 40014) and returns the token to use instead: the cached
// token if it is another one, without calling the upstream; else, once the
// upstream confirmed it rejects invalidToken, a replacement minted once for
// every concurrent reporter in the fleet. A token the upstream still
// accepts is returned as is. An empty invalidToken is Get.
//
// Reports of the current token are limited: a caller may report
// caller.RefreshesPerHour distinct current tokens per hour
// (ErrClientLimited), and reports may mint Options.AppRefreshesPerHour
// tokens per app per hour (ErrAppRefreshLimited).
func (b *Broker) Refresh(ctx context.Context, app, invalidToken string, caller Caller) (Token, error) {
	a, err := b.app(app)
	if err != nil {
		return Token{}, err
	}
	if invalidToken == "" {
		return a.token.join(ctx, want{cause: CauseDemand, caller: caller})
	}
	return a.token.join(ctx, want{cause: CauseInvalid, invalid: invalidToken, caller: caller})
}

// Ticket returns the app's ticket of kind (WeChat: jsapi, wx_card; WeCom:
// jsapi, agent_config; the other providers have none), fetched with the
// app's token and cached, single flighted and renewed like it. A kind the
// provider does not serve is ErrTicketType.
func (b *Broker) Ticket(ctx context.Context, app string, kind upstream.TicketType, caller Caller) (Token, error) {
	a, err := b.app(app)
	if err != nil {
		return Token{}, err
	}
	r := a.tickets[kind]
	switch {
	case r == nil && len(a.traits.TicketTypes) == 0:
		return Token{}, fmt.Errorf("%w: %s apps have no tickets", ErrTicketType, a.client.Provider())
	case r == nil:
		return Token{}, fmt.Errorf("%w: %q is not a ticket type of %s apps (want %s)",
			ErrTicketType, kind, a.client.Provider(), ticketTypes(a))
	}
	return r.join(ctx, want{cause: CauseDemand, caller: caller})
}

// TicketTypes returns the ticket types app serves.
func (b *Broker) TicketTypes(app string) ([]upstream.TicketType, error) {
	a, err := b.app(app)
	if err != nil {
		return nil, err
	}
	return a.traits.TicketTypes, nil
}

func ticketTypes(a *app) string {
	var names []string
	for _, t := range a.traits.TicketTypes {
		names = append(names, string(t))
	}
	return strings.Join(names, " or ")
}

// MintsOn returns how many new tokens the fleet minted for app on WeChat's
// day (Asia/Shanghai) that t falls in; the counts are kept for a week.
func (b *Broker) MintsOn(ctx context.Context, app string, t time.Time) (int64, error) {
	a, err := b.app(app)
	if err != nil {
		return 0, err
	}
	n, err := b.rdb.Get(ctx, a.token.keys.mints(Day(t))).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// margin is the least life a token must have left to be served while a
// fresher one can be had.
func (b *Broker) margin(life time.Duration) time.Duration {
	if b.opts.Margin > 0 {
		return min(b.opts.Margin, life/2)
	}
	return min(life/10, time.Minute)
}

// minMargin is the least life a token must have left to be served at all.
func (b *Broker) minMargin(life time.Duration) time.Duration {
	return min(b.opts.MinMargin, b.margin(life))
}

// ahead is the life left at which RunRefresher renews a token.
func (b *Broker) ahead(life time.Duration) time.Duration {
	a := min(life/4, 5*time.Minute)
	if b.opts.RefreshAhead > 0 {
		a = min(b.opts.RefreshAhead, life*3/4)
	}
	return max(a, b.margin(life))
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

type nopObserver struct{}

func (nopObserver) TokenMinted(string)                {}
func (nopObserver) TokenUpstreamError(string, string) {}
func (nopObserver) TokenTransportError(string)        {}
