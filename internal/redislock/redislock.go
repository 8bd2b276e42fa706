// Package redislock is lockd's lock engine: exclusive and read/write locks
// with leases, reentrancy by owner, writer preference and fencing tokens, kept
// in Redis and changed only by Lua scripts. Expiry is decided by Redis's own
// clock. Blocking waits are woken by Redis pub/sub (sharded pub/sub on Redis
// Cluster), with a bounded re-check that covers lost messages.
//
// Each lock is one Redis hash (see keys.go and common.lua), so Redis keeps
// all of it or none. A call whose reply is lost is undone exactly
// (acquire.go); KeepAlive renewals are batched per Redis node (renewer.go);
// with Options.DataLossGrace the engine notices Redis losing its data and
// holds new grants back (dataloss.go); CheckEviction refuses a Redis that
// may evict lock keys (eviction.go).
//
// The package has no gRPC types and can be used as a Go library on its own.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidKey is returned for a key that cannot name a lock; the
	// wrapping error names the rule.
	ErrInvalidKey = errors.New("redislock: invalid key")
	// ErrInvalidTTL is returned for a lease span that is not positive.
	ErrInvalidTTL = errors.New("redislock: invalid ttl")
	// ErrInvalidMode is returned for a mode other than Read, Write or
	// Permit.
	ErrInvalidMode = errors.New("redislock: invalid mode")
	// ErrInvalidLimit is returned for a permit asked for with a limit below
	// 1.
	ErrInvalidLimit = errors.New("redislock: invalid limit")
	// ErrLimitMismatch is returned for a permit asked for with another
	// limit than the one of the key's permits held.
	ErrLimitMismatch = errors.New("redislock: limit differs from the one of the permits held")
	// ErrNotHeld is returned when a lease is not held: it expired, was
	// released, or never existed.
	ErrNotHeld = errors.New("redislock: lease not held")
	// ErrUpgrade is returned when an owner holding only a read lease asks
	// for the write lock of the same key; granting it would deadlock.
	ErrUpgrade = errors.New("redislock: read lease cannot be upgraded to write")
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("redislock: client closed")
	// ErrNotReplicated is returned when Options.WaitReplicas replicas did
	// not confirm a grant or renewal in time; a grant is given back.
	ErrNotReplicated = errors.New("redislock: not confirmed by enough replicas")
	// ErrLate is returned when an acquire reached Redis only after this
	// client had given up waiting for its reply (Redis was stalled): it did
	// nothing, and may be tried again.
	ErrLate = errors.New("redislock: the call reached Redis after lockd gave up on it")
	// ErrInvalidLeaseID is returned when Request.NewLeaseID makes an id
	// that cannot name a lease.
	ErrInvalidLeaseID = errors.New("redislock: invalid lease id")
	// ErrKeyInUse is returned when a key is asked for as one kind while it
	// is held as another: a lock (or election) while semaphore permits are
	// held, or a permit while the lock is held.
	ErrKeyInUse = errors.New("redislock: key is in use as another kind")
)

// Mode is how a lease holds its key.
type Mode uint8

const (
	// Read is a shared hold: any number of readers, while no writer holds
	// or waits for the key.
	Read Mode = 1
	// Write is an exclusive hold.
	Write Mode = 2
	// Permit is one of a semaphore's permits: at most Request.Limit of a
	// key's are held at once.
	Permit Mode = 3
)

// String returns "read", "write" or "permit".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	case Permit:
		return "permit"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

func (m Mode) arg() string {
	switch m {
	case Read:
		return "r"
	case Permit:
		return "p"
	}
	return "w"
}

func parseMode(s string) Mode {
	switch s {
	case "r":
		return Read
	case "p":
		return Permit
	}
	return Write
}

// Lease is one hold on a key.
type Lease struct {
	// Key is the lock's name.
	Key string
	// ID is the lease's opaque, unguessable identifier.
	ID string
	// Owner is who holds the lease.
	Owner string
	// Mode is Read or Write.
	Mode Mode
	// FencingToken is strictly greater than every token issued before for
	// the key, also across a Redis restart that lost its data.
	FencingToken uint64
	// TTL is the span the lease was last granted or renewed for.
	TTL time.Duration
	// ExpireTime is when the lease expires unless renewed, by Redis's clock.
	ExpireTime time.Time
	// HoldCount is how many times the owner holds the lease.
	HoldCount uint32

	// remaining is ExpireTime less Redis's clock when the reply was made.
	remaining time.Duration
	// pausedUntil is when grants paused after a data loss resume (ms,
	// Redis clock), and now Redis's clock at the reply.
	pausedUntil, now int64
	// sent is when the call that granted the lease was sent: the lease
	// runs at least until sent + remaining.
	sent time.Time
}

// Request asks for a hold on a key.
type Request struct {
	// Key is the lock's name; see ValidateKey.
	Key string
	// Mode is Read, Write or Permit.
	Mode Mode
	// Limit is, for Mode Permit, how many permits of the key may be held
	// at once; every holder must give the same (ErrLimitMismatch). A key
	// whose permits are held is a semaphore: asking it for Read or Write,
	// or a key held so for a Permit, gives ErrKeyInUse.
	Limit int
	// Owner names the holder; the same owner asking again in the same mode
	// re-enters its lease. Empty means a fresh, unique owner.
	Owner string
	// NewLeaseID, when set, makes the id a new lease of this call would
	// get (a re-entry keeps its lease's id); called once per call, and
	// again when a grant's reply came too late to be used. Nil
	// means 128 fresh random bits. Its ids must be unguessable and never
	// repeat: a lease id is all it takes to release a lease. Callers use it
	// to bind lease ids to something of their own, such as the client a
	// lease was granted to. Ids must be 1 to 128 bytes without '|' or
	// control characters (ErrInvalidLeaseID).
	NewLeaseID func() string
	// TTL is the lease's span; it must be positive.
	TTL time.Duration
	// Wait is how long to wait for the lock; zero tries once. The wait
	// also ends with ctx.
	Wait time.Duration
	// RequestID, when set, makes retries idempotent: a repeated RequestID
	// for the same key, while the lease it was granted is held, returns the
	// first call's result unchanged. It replays only to the same mode and
	// owner (an owner-less first call only to owner-less retries). When the
	// reply to a call is lost, its grant is undone, with or without a
	// RequestID, unless a retry of the request claimed it first; a grant
	// that came back after its lease ran out by this host's clock, or that
	// too few replicas confirmed, is kept for the retry to claim.
	RequestID string
	// BeforeWait, if set, is called once when the first try found the key
	// busy and the call is about to wait, never for a call that gets the
	// lock at once or does not wait: callers count waiters with it. An
	// error ends the call with that error; otherwise done is called when
	// the wait ends.
	BeforeWait func() (done func(), err error)
}

// Result is the outcome of Acquire.
type Result struct {
	// Acquired is true when the lease was granted.
	Acquired bool
	// Lease is the granted lease; set only when Acquired.
	Lease Lease
	// RetryAfter is how long the current holders' leases still run when
	// the lock was not acquired.
	RetryAfter time.Duration
	// Holder is the owner of a lease holding the key when the lock was not
	// acquired: the write holder, or one of the readers; empty when none
	// holds it (writers wait for it, or grants are held back) and for
	// permits.
	Holder string
	// Available is, for Mode Permit, how many permits of the key were free
	// after the call.
	Available int

	// place is where the call stands in the queue (see placeHead); headLeft
	// is how long the head's place still runs.
	place    int
	headLeft time.Duration
}

// Options tune a Client. The zero value is ready to use.
type Options struct {
	// Prefix starts every Redis key and channel; default "lockd".
	Prefix string
	// Sharded uses SSUBSCRIBE and SPUBLISH, as Redis Cluster wants. It is
	// turned on by itself for a *redis.ClusterClient.
	Sharded bool
	// MaxRecheck bounds the time a waiter goes without re-checking the
	// lock when no release message arrives; default 2s.
	MaxRecheck time.Duration
	// Observer, if set, is told about grants, waits and lost leases.
	Observer Observer
	// DataLossGrace, when positive, turns on the watch for Redis losing
	// its data (a restart without persistence, a failover to a lagging
	// replica): KeepAlives whose leases vanished end at once, and new
	// grants wait this long, so holders learn first. Set it to the longest
	// lease a holder may believe it has (bounded as the operator sees
	// fit). Zero leaves the watch off: for a store whose data dies only
	// with the process, or locks whose loss costs little.
	DataLossGrace time.Duration
	// IdentityCheck, with DataLossGrace, checks every new connection of the
	// client before it serves anything (see IdentityCheck); its OnConnect
	// must be the client's.
	IdentityCheck *IdentityCheck
	// WatchInterval is how often each Redis master is asked whether it
	// restarted or failed over, with DataLossGrace; default 500ms.
	WatchInterval time.Duration
	// WaitReplicas, when positive, reports a grant or renewal only once
	// that many replicas have it (Redis WAIT), so a failover to one of
	// them keeps it; a grant they do not confirm within WaitTimeout fails
	// with ErrNotReplicated and is given back, or, with a RequestID, kept
	// for the retry, which gets it once the replicas confirm it.
	WaitReplicas int
	// WaitTimeout bounds each WAIT; default 1s.
	WaitTimeout time.Duration
	// Logger receives the engine's rare messages (data loss); default none.
	Logger *slog.Logger
	// AutoPipeline sends the scripts of Acquire, Release and Renew through
	// go-redis's automatic pipelining (the blocking face of
	// rdb.AutoPipeline()): calls made at the same moment from many
	// goroutines share round trips to Redis. Each call still waits for its
	// own reply, so one goroutine's calls run in the order it makes them.
	// A call's context no longer cuts short its wait for Redis: once sent,
	// it waits out the client's read timeout. Without WaitReplicas only;
	// default off.
	AutoPipeline bool
}

// Observer receives events for metrics. Its methods must be fast and safe
// for concurrent use.
type Observer interface {
	// Granted is called when a new lease (not a re-entry) is granted, with
	// the time the caller waited for it.
	Granted(mode Mode, waited time.Duration)
	// Waited is called when a wait ends without the lock.
	Waited(mode Mode, waited time.Duration)
	// Released is called when a lease ends by Release, with how long it was held.
	Released(mode Mode, held time.Duration)
	// Lost is called when KeepAlive finds a lease gone that it had renewed.
	Lost()
}

// DataLossObserver is an Observer also told when the engine learns that
// Redis lost lockd's data and new grants are held back (Options.DataLossGrace).
type DataLossObserver interface {
	Observer
	// DataLoss is called once for each data loss the engine learns of.
	DataLoss()
}

// Client is a lock engine on one Redis deployment. It is safe for concurrent
// use; one Client per process shares one pub/sub subscription among all its
// waiters.
type Client struct {
	rdb        redis.UniversalClient
	scripts    processor            // runs the lock scripts: rdb, or its autopipeliner
	cluster    *redis.ClusterClient // nil unless rdb is one
	prefix     string
	publish    string
	maxRecheck time.Duration
	obs        Observer
	log        *slog.Logger
	subs       *subscriber
	renewer    *renewer

	lossGrace     time.Duration
	watchInterval time.Duration
	loss          *lossWatch // nil without DataLossGrace
	identity      *IdentityCheck
	waitReplicas  int
	waitTimeout   time.Duration

	// clock is what the replies told of Redis's clock, replyTimeout how
	// long rdb waits for a reply: together they bound when a script
	// reaches nobody (notafter.go).
	clock        redisClock
	replyTimeout time.Duration

	// undos are the clean-ups of lost replies still retrying; Close gives
	// them a moment to land.
	undos   inFlight
	closing chan struct{}

	// offers are the acquires of writers waiting at the head of a queue,
	// for this process's releases of their keys to hand them (handoff.go).
	offers offers
	closed sync.Once
}

// New returns a Client on rdb, which may be a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient.
func New(rdb redis.UniversalClient, opts Options) *Client {
	if opts.Prefix == "" {
		opts.Prefix = "lockd"
	}
	if opts.MaxRecheck <= 0 {
		opts.MaxRecheck = 2 * time.Second
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = 500 * time.Millisecond
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = time.Second
	}
	cc, _ := rdb.(*redis.ClusterClient)
	sharded := opts.Sharded || cc != nil
	publish := "PUBLISH"
	if sharded {
		publish = "SPUBLISH"
	}
	obs := opts.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Client{
		rdb:           rdb,
		replyTimeout:  replyTimeout(rdb),
		cluster:       cc,
		prefix:        opts.Prefix,
		publish:       publish,
		maxRecheck:    opts.MaxRecheck,
		obs:           obs,
		log:           log,
		subs:          newSubscriber(rdb, sharded),
		lossGrace:     opts.DataLossGrace,
		watchInterval: opts.WatchInterval,
		waitReplicas:  opts.WaitReplicas,
		waitTimeout:   opts.WaitTimeout,
		closing:       make(chan struct{}),
	}
	c.scripts = rdb
	if opts.AutoPipeline && opts.WaitReplicas <= 0 {
		// The autopipeliner belongs to rdb and stops when rdb closes.
		if ap, err := rdb.AutoPipeline(); err == nil {
			c.scripts = ap
		} else {
			log.Warn("automatic pipelining unavailable; scripts use plain round trips", "err", err)
		}
	}
	c.renewer = newRenewer(c)
	if c.lossGrace > 0 {
		c.loss = newLossWatch(c)
		if opts.IdentityCheck != nil {
			c.identity = opts.IdentityCheck
			c.identity.w.Store(c.loss)
		}
	}
	return c
}

// Close stops the Client's subscriptions, renewals and watch, after giving
// clean-ups of lost replies still under way a moment to land. It does not
// close rdb.
func (c *Client) Close() error {
	c.closed.Do(func() {
		select {
		case <-c.undos.idle():
		case <-time.After(closeWait):
		}
		close(c.closing)
		if c.loss != nil {
			if c.identity != nil {
				c.identity.w.CompareAndSwap(c.loss, nil)
			}
			c.loss.close()
		}
		c.renewer.close()
	})
	return c.subs.close()
}

// closeWait bounds how long Close waits for clean-ups still retrying.
const closeWait = 2 * time.Second

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.rdb.Ping(ctx).Err()
}

// Release takes one hold away from the lease and returns the hold count
// left; the lease ends at zero. A lease that is not held gives ErrNotHeld.
// A non-empty requestID makes retries return the first call's result.
func (c *Client) Release(ctx context.Context, key, leaseID, requestID string) (uint32, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	return c.release(ctx, c.keys(key), key, leaseID, requestID, "")
}

func (c *Client) release(ctx context.Context, ks keySet, key, leaseID, requestID, keeper string) (uint32, error) {
	request := requestKey(requestID)
	ho, keys, args := c.handOver(ctx, ks, ks.releaseKeys(request), []any{leaseID, request, keeper, c.publish})
	reply, err := releaseScript.Run(ctx, c.scripts, keys, args...).Slice()
	if ho != nil {
		ho.answer(ctx, reply, err)
	}
	if err != nil {
		return 0, err
	}
	switch status(reply) {
	case -3:
		return 0, errNotKeeper
	case 5, 6:
		// A lone lease ended by the fast path: held since its fencing
		// token's instant (Redis's clock, in microseconds), measured here
		// by this host's clock, which is close enough for a histogram.
		mode := Write
		if status(reply) == 6 {
			mode = Read
		}
		token, _ := strconv.ParseInt(strAt(reply, 1), 10, 64)
		c.obs.Released(mode, max(0, time.Since(time.UnixMicro(token))))
		return 0, nil
	case 1:
	default:
		return 0, notHeld(key)
	}
	n := intAt(reply, 1)
	if n == 0 && len(reply) >= 4 {
		mode, _ := reply[2].(string)
		c.obs.Released(parseMode(mode), time.Duration(intAt(reply, 3))*time.Millisecond)
	}
	return uint32(n), nil
}

// errNotKeeper reports that a newer KeepAlive keeps the lease.
var errNotKeeper = errors.New("redislock: a newer KeepAlive keeps the lease")

// Renew extends the lease to ttl from now by Redis's clock; ttl zero keeps
// the lease's own span. A lease that is not held gives ErrNotHeld.
func (c *Client) Renew(ctx context.Context, key, leaseID string, ttl time.Duration) (Lease, error) {
	if err := ValidateKey(key); err != nil {
		return Lease{}, err
	}
	if ttl < 0 {
		return Lease{}, fmt.Errorf("%w: ttl must not be negative, got %v", ErrInvalidTTL, ttl)
	}
	if err := c.prepared(ctx); err != nil {
		return Lease{}, err
	}
	ks := c.keys(key)
	reply, err := c.run(ctx, renewScript, ks, ks.scriptKeys(true),
		leaseID, ttl.Milliseconds(), "", "0", c.lossGrace.Milliseconds())
	if err != nil {
		return Lease{}, err
	}
	c.notePause(ks, reply)
	if status(reply) != 1 {
		return Lease{}, notHeld(key)
	}
	return parseLease(key, reply)
}

func notHeld(key string) error {
	return NotHeld(key)
}

// NotHeld returns the error that Release, Renew, KeepAlive, Proclaim and
// Resign give for a lease of key that is not held: callers that refuse a
// lease id themselves answer with it, so the answer tells nothing more.
func NotHeld(key string) error {
	return fmt.Errorf("%w: key %q", ErrNotHeld, key)
}

func status(reply []any) int64 {
	if len(reply) == 0 {
		return -100
	}
	n, _ := reply[0].(int64)
	return n
}

func strAt(reply []any, i int) string {
	if i >= len(reply) {
		return ""
	}
	s, _ := reply[i].(string)
	return s
}

func intAt(reply []any, i int) int64 {
	if i >= len(reply) {
		return 0
	}
	n, _ := reply[i].(int64)
	return n
}

// parseLease reads {status, now_ms, hold_ms, lease_id, mode, hold_count,
// fencing_token, ttl_ms, expire_ms, owner}.
func parseLease(key string, r []any) (Lease, error) {
	if len(r) < 10 {
		return Lease{}, fmt.Errorf("redislock: unexpected lease reply %v", r)
	}
	id, _ := r[3].(string)
	mode, _ := r[4].(string)
	owner, _ := r[9].(string)
	now, expire := intAt(r, 1), intAt(r, 8)
	return Lease{
		Key:          key,
		ID:           id,
		Owner:        owner,
		Mode:         parseMode(mode),
		FencingToken: uint64(intAt(r, 6)),
		TTL:          time.Duration(intAt(r, 7)) * time.Millisecond,
		ExpireTime:   time.UnixMilli(expire),
		HoldCount:    uint32(intAt(r, 5)),
		remaining:    time.Duration(expire-now) * time.Millisecond,
		pausedUntil:  intAt(r, 2),
		now:          now,
	}, nil
}

// newID returns 128 random bits, URL-safe.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

type nopObserver struct{}

func (nopObserver) Granted(Mode, time.Duration)  {}
func (nopObserver) Waited(Mode, time.Duration)   {}
func (nopObserver) Released(Mode, time.Duration) {}
func (nopObserver) Lost()                        {}
