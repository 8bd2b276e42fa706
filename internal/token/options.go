package token

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/lockd/lockd/internal/upstream"
)

// Caller is who asks: the authenticated client, which reports are limited
// for and mints are logged with.
type Caller struct {
	// Name is the client's name; empty when lockd runs without auth,
	// where every caller shares one budget.
	Name string
	// RefreshesPerHour bounds the distinct current tokens the client may
	// report per hour (see Refresh): 0 means DefaultRefreshesPerHour,
	// negative no bound.
	RefreshesPerHour int
}

func (c Caller) String() string {
	if c.Name == "" {
		return "-"
	}
	return c.Name
}

// refresher is the Caller of RunRefresher's renewals, for logs.
var refresher = Caller{Name: "(refresher)"}

// Observer receives the broker's upstream events for metrics; its method
// set matches what lockd_token_mints_total{app} and
// lockd_token_upstream_errors_total{app,errcode} need. Methods must be fast
// and safe for concurrent use.
type Observer interface {
	// TokenMinted is called for each new access_token the upstream
	// handed out and the broker stored.
	TokenMinted(app string)
	// TokenUpstreamError is called when the upstream answered a call
	// (token, ticket or probe) with an error code (see
	// upstream.Error.CodeText).
	TokenUpstreamError(app, code string)
	// TokenTransportError is called when an upstream call got no error
	// code: connection failures, timeouts, HTTP errors, unusable bodies.
	TokenTransportError(app string)
}

// FetchObserver may be implemented by an Observer that also wants every
// call of the upstream's token and ticket endpoints counted.
type FetchObserver interface {
	// TokenFetched is called for each call for app's value
	// ("access_token" or a ticket type) with its outcome: "new", "same",
	// "renewed", "error", or "paced" for a call the fleet's pace or hourly
	// bound held back.
	TokenFetched(app, value, outcome string)
	// TokenPossiblyMinted is called for a token call that got no answer
	// after its request was sent: the upstream may have minted.
	TokenPossiblyMinted(app string)
}

// CauseObserver may be implemented by an Observer that also wants to know
// why each token was minted.
type CauseObserver interface {
	// TokenMintedBecause is called with TokenMinted, with the mint's cause.
	TokenMintedBecause(app string, cause Cause)
}

// StateObserver may be implemented by an Observer that also wants the
// state of each app's access_token whenever the broker reads it (at least
// once a minute while RunRefresher runs).
type StateObserver interface {
	// TokenState reports the expiry of the token this replica would serve
	// (by the local clock; zero without one), the new tokens the fleet
	// minted today (Asia/Shanghai), the failed mints in a row with this
	// replica's credentials (0 when the last mint succeeded), and whether
	// the token comes from this replica's memory because Redis cannot be
	// reached. mintsToday and failures are -1 when Redis could not be read.
	TokenState(app string, expire time.Time, mintsToday int64, failures int, fromMemory bool)
}

// App is an app the broker serves.
type App struct {
	// Name is what callers pass as `app`: 1 to 128 bytes of printable
	// characters without braces (lockd's config allows fewer).
	Name string
	// Upstream is how to mint the app's tokens.
	Upstream upstream.Config
}

// Options tune a Broker. The zero value is ready to use; zero fields take
// the defaults named.
type Options struct {
	// Prefix starts every Redis key and channel the broker uses (lockd's
	// --namespace); default "lockd". Keys live under Prefix+":token:", the
	// lock on each app under Prefix+":token:lock".
	Prefix string
	// Sharded uses SPUBLISH and SSUBSCRIBE, as Redis Cluster wants; it is
	// turned on by itself for a *redis.ClusterClient.
	Sharded bool
	// HTTPClient calls the upstream; default a client with MintTimeout.
	HTTPClient *http.Client
	// MintTimeout bounds one upstream call when HTTPClient is not given;
	// default 10s.
	MintTimeout time.Duration
	// MintLockTTL is the lease of the lock a replica holds while it mints,
	// kept alive as long as the mint lasts: a replica that dies mid-mint
	// holds the others up at most this long. Default 3s.
	MintLockTTL time.Duration
	// Margin is the least life a token must have left to be served while
	// a fresher one can be had. Default a tenth of the token's lifetime,
	// at most a minute.
	Margin time.Duration
	// MinMargin is the least life a token must have left to be served at
	// all, for the caller to use it; default 500ms (at most Margin).
	MinMargin time.Duration
	// ExpirySlack is how far a rounded expires_in may be off; default 1s
	// (the upstream rounds to whole seconds).
	ExpirySlack time.Duration
	// RefreshAhead is the life left at which RunRefresher renews a token,
	// less a jitter of up to half the span down to Margin. Default a
	// quarter of the lifetime, at most five minutes (the stable API hands
	// out a new token only in its last five minutes).
	RefreshAhead time.Duration
	// IdleAfter is how long after the last call for it an app's token (or
	// ticket) stops being renewed ahead; default 3h, negative never.
	IdleAfter time.Duration
	// MaxWait bounds how long a call waits for another replica's mint;
	// default 30s. The caller's deadline ends the wait sooner.
	MaxWait time.Duration
	// Recheck bounds how long a waiting call goes without re-reading the
	// cache when no notice arrives; default 1s.
	Recheck time.Duration
	// RedisTimeout bounds a read of the cache, after which the last token
	// read is served from memory while it is valid (and no notice
	// announced a newer one); default 1s.
	RedisTimeout time.Duration
	// CredentialsHold is how long no replica with the same credentials
	// calls the upstream after it rejected them, doubling with each
	// failure in a row up to MaxHold; default 1 minute.
	CredentialsHold time.Duration
	// QuotaHold is the same after a per-minute quota error; default 1
	// minute.
	QuotaHold time.Duration
	// UnavailableHold is the same after a transient failure (system busy,
	// timeouts, unknown errcodes); default 2s.
	UnavailableHold time.Duration
	// MaxHold caps the holds above; default 10 minutes.
	MaxHold time.Duration
	// QuotaProbe is how often the upstream is tried while its daily quota
	// (45009) is spent, until WeChat's day turns; default 1 hour.
	QuotaProbe time.Duration
	// VerifyInterval is how long the fleet trusts its verdict on a
	// reported token (accepted by the upstream, or not replaceable now);
	// default 30s.
	VerifyInterval time.Duration
	// AppRefreshesPerHour bounds the mints reports may cause per app per
	// RefreshWindow, whoever reports; default 12, negative no bound.
	AppRefreshesPerHour int
	// RefreshWindow is the window of the refresh limits; default an hour.
	RefreshWindow time.Duration
	// FetchInterval is the least time between two calls of the upstream's
	// token (or ticket) endpoint for one value, fleet-wide, whatever the
	// upstream answered before; default 1s, negative none.
	FetchInterval time.Duration
	// FetchesPerHour bounds the calls of the upstream's token (or ticket)
	// endpoint for one value per hour, fleet-wide, counted from the first;
	// beyond it calls that need the upstream get ErrFetchLimited. Default
	// 120 (an app needs about one an hour, and reports at most
	// AppRefreshesPerHour more), negative no bound.
	FetchesPerHour int
	// ForceRefreshPerDay bounds stable force_refresh calls per app per day
	// (WeChat allows 20); default 20, negative means no bound.
	ForceRefreshPerDay int
	// ForceRefreshInterval is the least time between two force_refresh
	// calls of an app (WeChat: 30s); default 30s, negative means none.
	ForceRefreshInterval time.Duration
	// Now is the clock of the refresh limits and verdicts; default
	// time.Now. Expiry always follows Redis's clock.
	Now func() time.Time
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
		o.Prefix = "lockd"
	}
	def(&o.MintTimeout, upstream.DefaultTimeout)
	def(&o.MintLockTTL, 3*time.Second)
	def(&o.MinMargin, 500*time.Millisecond)
	def(&o.ExpirySlack, time.Second)
	def(&o.IdleAfter, 3*time.Hour)
	def(&o.MaxWait, 30*time.Second)
	def(&o.Recheck, time.Second)
	def(&o.RedisTimeout, time.Second)
	def(&o.CredentialsHold, time.Minute)
	def(&o.QuotaHold, time.Minute)
	def(&o.UnavailableHold, 2*time.Second)
	def(&o.MaxHold, 10*time.Minute)
	def(&o.QuotaProbe, time.Hour)
	def(&o.VerifyInterval, 30*time.Second)
	def(&o.RefreshWindow, time.Hour)
	def(&o.ForceRefreshInterval, 30*time.Second)
	def(&o.FetchInterval, time.Second)
	if o.FetchInterval < 0 {
		o.FetchInterval = 0
	}
	switch {
	case o.FetchesPerHour == 0:
		o.FetchesPerHour = DefaultFetchesPerHour
	case o.FetchesPerHour < 0:
		o.FetchesPerHour = 0
	}
	if o.ExpirySlack < 0 {
		o.ExpirySlack = 0
	}
	if o.VerifyInterval < 0 {
		o.VerifyInterval = 0
	}
	if o.ForceRefreshInterval < 0 {
		o.ForceRefreshInterval = 0
	}
	switch {
	case o.AppRefreshesPerHour == 0:
		o.AppRefreshesPerHour = 12
	case o.AppRefreshesPerHour < 0:
		o.AppRefreshesPerHour = 0
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
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}
