// Package token is lockd's access_token broker: one WeChat or WeCom
// access_token per configured app, cached in Redis and shared by every lockd
// replica, so that however many callers ask at once the upstream is called
// once per refresh.
//
// # How a token is served
//
// Get reads the cached token (one round trip, shared by every concurrent
// caller of the process) and returns it while it has more than a safety
// margin left. When it is missing or expiring, the replica takes lockd's own
// lock on the app (a redislock lease under its own prefix, so it never
// collides with user locks), reads the cache again, calls the upstream,
// stores the token and publishes a notice. Replicas that did not get the
// lock wait for that notice (or re-check every Options.Recheck, in case it
// is lost) and read the new token: N replicas × M callers, one mint.
//
// Refresh is a compare-and-refresh: a caller reports the token the upstream
// rejected. If the cache holds another one, that is the answer and the
// upstream is not called; if it holds the reported one, one replica mints a
// replacement for every reporter (the stable API with force_refresh, within
// WeChat's limits, which the broker tracks in Redis).
//
// RunRefresher renews each app's token ahead of expiry, with jitter, on
// whichever replica's timer fires first (the lock again decides), so that
// callers normally never wait on the upstream. A failed renewal keeps the
// last good token in service until it expires.
//
// # Failures
//
// A failed mint is recorded in Redis for every replica: a credentials error
// for a minute, quota for a minute, anything transient for two seconds
// (Options tune these). Until the record expires, callers that need a new
// token get the recorded error and no replica calls the upstream: a broken
// configuration is not hammered, and a stampede after a failure is not
// turned into one call per replica. Errors are *Error values wrapping the
// upstream's *wechat.Error. When Redis cannot be reached the broker returns
// its error and mints nothing, so that no replica mints behind the others'
// backs; when Redis returns, the next callers mint once.
//
// # Redis keys
//
// With the default prefix "lockd:token", for app A:
//
//	lockd:token:{A}                   hash: token, expire_ms, lifetime_ms, written_ms, cause, same, gen, fence;
//	                                  expires with the token
//	lockd:token:{A}:failure           the last failed mint (JSON, no secret); expires when the next attempt is due
//	lockd:token:{A}:mints:YYYY-MM-DD  successful mints that day (Asia/Shanghai); kept 8 days
//	lockd:token:{A}:forces:YYYY-MM-DD stable force_refresh calls that day; kept 8 days
//	lockd:token:{A}:force-gate        present while the last force_refresh is under 30 s old
//	lockd:token:{A}:minted            pub/sub channel: a token was stored or a mint failed
//	lockd:token:lock:{A}…             lockd's lock on the app (package redislock)
//
// No key or value holds a secret; every key expires.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/wechat"
)

var (
	// ErrUnknownApp is returned for an app name that is not configured.
	ErrUnknownApp = errors.New("token: unknown app")
	// ErrRefreshLimited is wrapped by the *Error Refresh returns when the
	// reported token can be replaced only by a stable force_refresh and
	// WeChat's limits on those (a daily number, a minimum interval) do not
	// allow one now.
	ErrRefreshLimited = errors.New("token: force_refresh limit reached")
	// ErrTimeout is returned when a call waited Options.MaxWait for
	// another replica's mint without seeing a token.
	ErrTimeout = errors.New("token: timed out waiting for the token to be minted")
	// ErrClosed is returned by calls on a closed Broker.
	ErrClosed = errors.New("token: broker closed")
)

// Token is an access_token as the broker hands it out.
type Token struct {
	// AccessToken is the token to send to the upstream's APIs.
	AccessToken string
	// ExpireTime is when the upstream stops accepting it, by Redis's clock.
	ExpireTime time.Time
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
	// Err is the cause: the upstream's *wechat.Error, or an error wrapping
	// ErrRefreshLimited (and the upstream's error, when it refused).
	Err error
	// RetryAfter is how long no replica will call the upstream for the
	// app; zero when unknown.
	RetryAfter time.Duration
	// Recorded is true when the failure is one an earlier mint recorded in
	// Redis, rather than this call's own.
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
	// invalid.
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

func parseCause(s string) Cause {
	for _, c := range []Cause{CauseDemand, CauseInvalid, CauseAhead} {
		if s == c.String() {
			return c
		}
	}
	return 0
}

// Observer receives the broker's upstream events for metrics; its method
// set matches what lockd_token_mints_total{app} and
// lockd_token_upstream_errors_total{app,errcode} need. Methods must be fast
// and safe for concurrent use.
type Observer interface {
	// TokenMinted is called after each successful upstream token call.
	TokenMinted(app string)
	// TokenUpstreamError is called when the upstream answered a token call
	// with a non-zero errcode.
	TokenUpstreamError(app string, errcode int)
	// TokenTransportError is called when a token call got no errcode:
	// connection failures, timeouts, HTTP errors, unusable bodies.
	TokenTransportError(app string)
}

// CauseObserver may be implemented by an Observer that also wants to know
// why each token was minted.
type CauseObserver interface {
	// TokenMintedBecause is called with TokenMinted, with the mint's cause.
	TokenMintedBecause(app string, cause Cause)
}

// App is an app the broker serves.
type App struct {
	// Name is what callers pass as `app`: 1 to 128 bytes of printable
	// characters without braces (lockd's config allows fewer).
	Name string
	// Upstream is how to mint the app's tokens.
	Upstream wechat.Config
}

// Options tune a Broker. The zero value is ready to use; zero fields take
// the defaults named.
type Options struct {
	// Prefix starts every Redis key and channel; default "lockd:token".
	// The lock on each app lives under Prefix+":lock".
	Prefix string
	// Sharded uses SPUBLISH and SSUBSCRIBE, as Redis Cluster wants; it is
	// turned on by itself for a *redis.ClusterClient.
	Sharded bool
	// HTTPClient calls the upstream; default a client with MintTimeout.
	HTTPClient *http.Client
	// MintTimeout bounds one upstream call when HTTPClient is not given;
	// default 10s. The lock on the app is held for twice that, plus 5s.
	MintTimeout time.Duration
	// Margin is the least life a token must have left to be served,
	// unless the upstream offers nothing fresher or cannot be reached.
	// Default a tenth of the token's lifetime, at most a minute.
	Margin time.Duration
	// RefreshAhead is the life left at which RunRefresher renews a token,
	// less a jitter of up to half the span down to Margin. Default a
	// quarter of the lifetime, at most five minutes (the stable API hands
	// out a new token only in its last five minutes).
	RefreshAhead time.Duration
	// MaxWait bounds how long a call waits for another replica's mint;
	// default 30s. The caller's deadline ends the wait sooner.
	MaxWait time.Duration
	// Recheck bounds how long a waiting call goes without re-reading the
	// cache when no notice arrives; default 1s.
	Recheck time.Duration
	// CredentialsHold is how long no replica calls the upstream after it
	// rejected the app's credentials; default 1 minute.
	CredentialsHold time.Duration
	// QuotaHold is how long no replica calls the upstream after a quota
	// error; default 1 minute.
	QuotaHold time.Duration
	// UnavailableHold is how long no replica calls the upstream after a
	// transient failure; default 2s.
	UnavailableHold time.Duration
	// RefreshCooldown is how long a token minted for a Refresh is returned
	// as is when it is reported again: the upstream just vouched for it.
	// Default 10s; negative turns it off.
	RefreshCooldown time.Duration
	// ForceRefreshPerDay bounds stable force_refresh calls per app per day
	// (WeChat allows 20); default 20, negative means no bound.
	ForceRefreshPerDay int
	// ForceRefreshInterval is the least time between two force_refresh
	// calls of an app (WeChat: 30s); default 30s, negative means none.
	ForceRefreshInterval time.Duration
	// Observer, if set, is told about mints and upstream errors.
	Observer Observer
	// Logger receives the broker's logs; default slog.Default(). No log
	// line holds a secret or a token.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Prefix == "" {
		o.Prefix = "lockd:token"
	}
	def(&o.MintTimeout, wechat.DefaultTimeout)
	def(&o.MaxWait, 30*time.Second)
	def(&o.Recheck, time.Second)
	def(&o.CredentialsHold, time.Minute)
	def(&o.QuotaHold, time.Minute)
	def(&o.UnavailableHold, 2*time.Second)
	def(&o.RefreshCooldown, 10*time.Second)
	def(&o.ForceRefreshInterval, 30*time.Second)
	if o.RefreshCooldown < 0 {
		o.RefreshCooldown = 0
	}
	if o.ForceRefreshInterval < 0 {
		o.ForceRefreshInterval = 0
	}
	switch {
	case o.ForceRefreshPerDay == 0:
		o.ForceRefreshPerDay = 20
	case o.ForceRefreshPerDay < 0:
		o.ForceRefreshPerDay = 0
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.MintTimeout}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}

// Broker serves the access_tokens of a fixed set of apps. It is safe for
// concurrent use; every replica builds its own on the shared Redis.
type Broker struct {
	rdb     redis.UniversalClient
	opts    Options
	log     *slog.Logger
	locks   *redislock.Client
	publish string
	lockTTL time.Duration
	apps    map[string]*app
	notify  *notifier

	ctx       context.Context // ends when the Broker is closed
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// New returns a Broker serving apps on rdb, which may be a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient. It checks every app's
// name and upstream configuration, and subscribes to the apps' notices in
// the background.
func New(rdb redis.UniversalClient, apps []App, opts Options) (*Broker, error) {
	opts = opts.withDefaults()
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := opts.Sharded || cluster
	b := &Broker{
		rdb:     rdb,
		opts:    opts,
		log:     opts.Logger,
		publish: "PUBLISH",
		lockTTL: 2*opts.MintTimeout + 5*time.Second,
		apps:    map[string]*app{},
	}
	if sharded {
		b.publish = "SPUBLISH"
	}
	for _, a := range apps {
		if err := validName(a.Name); err != nil {
			return nil, err
		}
		if b.apps[a.Name] != nil {
			return nil, fmt.Errorf("token: app %q configured twice", a.Name)
		}
		client, err := wechat.NewClient(a.Upstream, opts.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("token: app %q: %w", a.Name, err)
		}
		b.apps[a.Name] = &app{
			b:       b,
			name:    a.Name,
			client:  client,
			keys:    newKeys(opts.Prefix, a.Name),
			sig:     newSignal(),
			flights: map[string]*flight{},
		}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.locks = redislock.New(rdb, redislock.Options{Prefix: opts.Prefix + ":lock", Sharded: sharded})
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

// Close stops the broker's subscriptions and ends calls still waiting with
// ErrClosed. Mints under way finish and are stored. It does not close rdb.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		b.notify.close()
		_ = b.locks.Close()
	})
	return nil
}

// Get returns the app's token: the cached one while it has more than the
// margin left, else a new one minted by exactly one replica, waited for up
// to ctx's deadline and Options.MaxWait.
func (b *Broker) Get(ctx context.Context, app string) (Token, error) {
	a := b.apps[app]
	if a == nil {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownApp, app)
	}
	return a.join(ctx, want{cause: CauseDemand})
}

// Refresh reports that the upstream rejected invalidToken (errcode 40001 or
// 42001) and returns the token to use instead: the cached token if it is
// another one, without calling the upstream; else a replacement minted once
// for every concurrent reporter in the fleet. An empty invalidToken is Get.
func (b *Broker) Refresh(ctx context.Context, app, invalidToken string) (Token, error) {
	a := b.apps[app]
	if a == nil {
		return Token{}, fmt.Errorf("%w: %q", ErrUnknownApp, app)
	}
	if invalidToken == "" {
		return a.join(ctx, want{cause: CauseDemand})
	}
	return a.join(ctx, want{cause: CauseInvalid, invalid: invalidToken})
}

// MintsOn returns how many tokens the fleet minted for app on WeChat's day
// (Asia/Shanghai) that t falls in; the counts are kept for a week.
func (b *Broker) MintsOn(ctx context.Context, app string, t time.Time) (int64, error) {
	a := b.apps[app]
	if a == nil {
		return 0, fmt.Errorf("%w: %q", ErrUnknownApp, app)
	}
	n, err := b.rdb.Get(ctx, a.keys.mints(Day(t))).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// margin is the least life a token must have left to be served.
func (b *Broker) margin(life time.Duration) time.Duration {
	if b.opts.Margin > 0 {
		return min(b.opts.Margin, life/2)
	}
	return min(life/10, time.Minute)
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

func (nopObserver) TokenMinted(string)             {}
func (nopObserver) TokenUpstreamError(string, int) {}
func (nopObserver) TokenTransportError(string)     {}
