// Package redislock is lockd's lock engine: exclusive and read/write locks
// with leases, reentrancy by owner, writer preference and fencing tokens, kept
// in Redis and changed only by Lua scripts. Expiry is decided by Redis's own
// clock. Blocking waits are woken by Redis pub/sub (sharded pub/sub on Redis
// Cluster), with a bounded re-check that covers lost messages.
//
// The package has no gRPC types and can be used as a Go library on its own.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidKey is returned for a key that cannot name a lock; the
	// wrapping error names the rule.
	ErrInvalidKey = errors.New("redislock: invalid key")
	// ErrInvalidTTL is returned for a lease span that is not positive.
	ErrInvalidTTL = errors.New("redislock: invalid ttl")
	// ErrInvalidMode is returned for a mode other than Read or Write.
	ErrInvalidMode = errors.New("redislock: invalid mode")
	// ErrNotHeld is returned when a lease is not held: it expired, was
	// released, or never existed.
	ErrNotHeld = errors.New("redislock: lease not held")
	// ErrUpgrade is returned when an owner holding only a read lease asks
	// for the write lock of the same key; granting it would deadlock.
	ErrUpgrade = errors.New("redislock: read lease cannot be upgraded to write")
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("redislock: client closed")
)

// Mode is how a lease holds its key.
type Mode uint8

const (
	// Read is a shared hold: any number of readers, while no writer holds
	// or waits for the key.
	Read Mode = 1
	// Write is an exclusive hold.
	Write Mode = 2
)

// String returns "read" or "write".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

func (m Mode) arg() string {
	if m == Read {
		return "r"
	}
	return "w"
}

func parseMode(s string) Mode {
	if s == "r" {
		return Read
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
}

// Request asks for a hold on a key.
type Request struct {
	// Key is the lock's name; see ValidateKey.
	Key string
	// Mode is Read or Write.
	Mode Mode
	// Owner names the holder; the same owner asking again in the same mode
	// re-enters its lease. Empty means a fresh, unique owner.
	Owner string
	// TTL is the lease's span; it must be positive.
	TTL time.Duration
	// Wait is how long to wait for the lock; zero tries once. The wait
	// also ends with ctx.
	Wait time.Duration
	// RequestID, when set, makes retries idempotent: a repeated RequestID
	// for the same key while its lease is held returns that lease again.
	RequestID string
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
	// Lost is called when KeepAlive finds its lease gone.
	Lost()
}

// Client is a lock engine on one Redis deployment. It is safe for concurrent
// use; one Client per process shares one pub/sub subscription among all its
// waiters.
type Client struct {
	rdb        redis.UniversalClient
	prefix     string
	publish    string
	maxRecheck time.Duration
	obs        Observer
	subs       *subscriber
	renewer    *renewer
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
	_, cluster := rdb.(*redis.ClusterClient)
	sharded := opts.Sharded || cluster
	publish := "PUBLISH"
	if sharded {
		publish = "SPUBLISH"
	}
	obs := opts.Observer
	if obs == nil {
		obs = nopObserver{}
	}
	return &Client{
		rdb:        rdb,
		prefix:     opts.Prefix,
		publish:    publish,
		maxRecheck: opts.MaxRecheck,
		obs:        obs,
		subs:       newSubscriber(rdb, sharded),
		renewer:    newRenewer(rdb),
	}
}

// Close stops the Client's subscriptions and renewals. It does not close rdb.
func (c *Client) Close() error {
	c.renewer.close()
	return c.subs.close()
}

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.rdb.Ping(ctx).Err()
}

// Acquire asks for a hold on req.Key in req.Mode, waiting up to req.Wait
// (bounded by ctx) when the key is busy. Not getting the lock in time is not
// an error: the Result says Acquired false with the holders' RetryAfter.
func (c *Client) Acquire(ctx context.Context, req Request) (Result, error) {
	if err := ValidateKey(req.Key); err != nil {
		return Result{}, err
	}
	if req.Mode != Read && req.Mode != Write {
		return Result{}, fmt.Errorf("%w: %d", ErrInvalidMode, req.Mode)
	}
	if req.TTL < time.Millisecond {
		return Result{}, fmt.Errorf("%w: ttl must be at least 1ms, got %v", ErrInvalidTTL, req.TTL)
	}
	ownerGiven := req.Owner != ""
	if !ownerGiven {
		req.Owner = "lockd-" + newID()
	}
	ks := newKeySet(c.prefix, req.Key)
	a := attempt{c: c, ks: ks, req: req, ownerGiven: ownerGiven, leaseID: newID(), waiter: newID(), start: time.Now()}

	if req.Wait <= 0 {
		res, err := a.try(ctx, 0)
		return a.finish(ctx, res, err)
	}
	deadline := a.start.Add(req.Wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	res, err := a.try(ctx, time.Until(deadline))
	if err != nil || res.Acquired {
		return a.finish(ctx, res, err)
	}
	wake, done, err := c.subs.subscribe(ctx, ks.channel, deadline, c.maxRecheck)
	if err != nil {
		a.unwait()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = nil // the wait ended before the subscription was confirmed
		}
		return a.finish(ctx, res, err)
	}
	defer done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		// Re-check after subscribing, and after every wake-up.
		res, err = a.try(ctx, left)
		if err != nil || res.Acquired {
			return a.finish(ctx, res, err)
		}
		timer.Reset(min(res.RetryAfter, time.Until(deadline), c.maxRecheck))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			a.unwait()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's deadline ends the wait like wait_timeout.
				return a.finish(ctx, res, nil)
			}
			return a.finish(ctx, res, ctx.Err())
		}
	}
	a.unwait()
	return a.finish(ctx, res, nil)
}

// attempt is one Acquire call: its lease id (used if a new lease is granted)
// and its waiter id (used while it queues as a writer).
type attempt struct {
	c          *Client
	ks         keySet
	req        Request
	ownerGiven bool
	leaseID    string
	waiter     string
	start      time.Time
	queued     bool
	replayed   bool // the grant is a retried request_id's first result
}

func (a *attempt) try(ctx context.Context, wait time.Duration) (Result, error) {
	keys := []string{a.ks.state, a.ks.holders, a.ks.writers}
	if a.req.RequestID != "" {
		keys = append(keys, a.ks.requestPrefix+"acquire:"+a.req.RequestID)
	}
	waitMs := int64(0)
	if wait > 0 {
		// A queued writer holds readers back only a few re-checks ahead;
		// each re-check extends it. A writer whose process dies stops
		// blocking readers soon, not when its whole wait would end.
		waitMs = max(1, min(wait, 3*a.c.maxRecheck).Milliseconds())
	}
	given := "0"
	if a.ownerGiven {
		given = "1"
	}
	reply, err := acquireScript.Run(ctx, a.c.rdb, keys,
		a.req.Mode.arg(), a.req.Owner, a.leaseID, a.req.TTL.Milliseconds(), waitMs, a.waiter, given).Slice()
	if err != nil {
		// The script may have run with its reply lost: give back what it
		// may have granted or queued.
		queued := a.queued || waitMs > 0 && a.req.Mode == Write
		a.queued = false
		go a.abandon(queued)
		return Result{}, err
	}
	switch status(reply) {
	case 1, 2:
		l, err := parseLease(a.req.Key, reply)
		if err != nil {
			return Result{}, err
		}
		a.queued = false
		a.replayed = status(reply) == 2
		return Result{Acquired: true, Lease: l}, nil
	case 0:
		a.queued = a.queued || waitMs > 0 && a.req.Mode == Write
		return Result{RetryAfter: msArg(reply, 1)}, nil
	case -2:
		return Result{}, fmt.Errorf("%w: key %q", ErrUpgrade, a.req.Key)
	}
	return Result{}, fmt.Errorf("redislock: unexpected acquire reply %v", reply)
}

// finish reports the outcome, and gives back a lease granted to a caller
// that has gone away meanwhile, so it leaves nothing behind.
func (a *attempt) finish(ctx context.Context, res Result, err error) (Result, error) {
	waited := time.Since(a.start)
	if err == nil && res.Acquired && ctx.Err() != nil {
		// Only a hold this call added is given back, and only when no
		// retry with the same request id could claim it.
		if !a.replayed && a.req.RequestID == "" {
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_, _ = a.c.Release(bg, a.req.Key, res.Lease.ID, "")
		}
		return Result{}, ctx.Err()
	}
	if err != nil {
		return Result{}, err
	}
	if res.Acquired {
		if res.Lease.ID == a.leaseID && !a.replayed {
			a.c.obs.Granted(a.req.Mode, waited)
		}
	} else if a.req.Wait > 0 {
		a.c.obs.Waited(a.req.Mode, waited)
	}
	return res, nil
}

// abandon gives back a lease this attempt may have been granted without
// hearing of it (unless a retry with its request id can claim it), and
// withdraws it from the writers' queue. A lease id is only ever granted to
// the attempt that made it up, so this touches no one else's hold.
func (a *attempt) abandon(queued bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.req.RequestID == "" {
		// With a request id the caller retries and gets the grant back.
		_, _ = a.c.Release(ctx, a.req.Key, a.leaseID, "")
	}
	if queued {
		a.withdraw(ctx)
	}
}

// unwait withdraws a queued writer, so the readers it held back go in now
// rather than when its wait would have ended.
func (a *attempt) unwait() {
	if !a.queued {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.withdraw(ctx)
	a.queued = false
}

func (a *attempt) withdraw(ctx context.Context) {
	_ = unwaitScript.Run(ctx, a.c.rdb, []string{a.ks.state, a.ks.holders, a.ks.writers},
		a.waiter, a.ks.channel, a.c.publish).Err()
}

// Release takes one hold away from the lease and returns the hold count
// left; the lease ends at zero. A lease that is not held gives ErrNotHeld.
// A non-empty requestID makes retries return the first call's result.
func (c *Client) Release(ctx context.Context, key, leaseID, requestID string) (uint32, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	ks := newKeySet(c.prefix, key)
	keys := []string{ks.state, ks.holders, ks.writers}
	if requestID != "" {
		keys = append(keys, ks.requestPrefix+"release:"+requestID)
	}
	reply, err := releaseScript.Run(ctx, c.rdb, keys, leaseID, ks.channel, c.publish).Slice()
	if err != nil {
		return 0, err
	}
	if status(reply) != 1 || len(reply) < 2 {
		return 0, notHeld(key)
	}
	n, _ := reply[1].(int64)
	if n == 0 && len(reply) == 4 {
		mode, _ := reply[2].(string)
		c.obs.Released(parseMode(mode), msArg(reply, 3))
	}
	return uint32(n), nil
}

// Renew extends the lease to ttl from now by Redis's clock; ttl zero keeps
// the lease's own span. A lease that is not held gives ErrNotHeld.
func (c *Client) Renew(ctx context.Context, key, leaseID string, ttl time.Duration) (Lease, error) {
	if err := ValidateKey(key); err != nil {
		return Lease{}, err
	}
	if ttl < 0 {
		return Lease{}, fmt.Errorf("%w: ttl must not be negative, got %v", ErrInvalidTTL, ttl)
	}
	ks := newKeySet(c.prefix, key)
	reply, err := renewScript.Run(ctx, c.rdb, []string{ks.state, ks.holders, ks.writers},
		leaseID, ttl.Milliseconds()).Slice()
	if err != nil {
		return Lease{}, err
	}
	if status(reply) != 1 {
		return Lease{}, notHeld(key)
	}
	return parseLease(key, reply)
}

// KeepAlive renews the lease about every ttl/3 (ttl zero keeps the lease's
// own span) and calls renewed after each renewal, until ctx ends or the lease
// is lost. It returns an error wrapping ErrNotHeld when the lease is gone, or
// when renewals kept failing until the lease was about to run out: the
// holder learns of the loss before anyone else can be granted the lock.
// Renewals of all leases a Client keeps alive share pipelines.
func (c *Client) KeepAlive(ctx context.Context, key, leaseID string, ttl time.Duration, renewed func(Lease) error) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("%w: ttl must not be negative, got %v", ErrInvalidTTL, ttl)
	}
	ks := newKeySet(c.prefix, key)
	var (
		expiry time.Time // by the local clock, erring early
		span   time.Duration
	)
	due := time.Now()
	for {
		// Once a renewal has been confirmed, waiting for the next one ends
		// a little before the lease would run out.
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if !expiry.IsZero() {
			rctx, cancel = context.WithDeadline(ctx, expiry.Add(-span/6))
		}
		res := c.renewer.renew(rctx, ks, key, leaseID, ttl, span/10, due)
		cancel()
		switch err := res.err; {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrNotHeld):
			c.obs.Lost()
			return err
		case err != nil && expiry.IsZero():
			return err
		case err != nil:
			giveUp := expiry.Add(-span / 6)
			if !time.Now().Before(giveUp) {
				c.obs.Lost()
				return fmt.Errorf("%w: key %q: renewals failed until the lease ran out: %v", ErrNotHeld, key, err)
			}
			due = time.Now().Add(min(span/10, time.Until(giveUp)))
			continue
		}
		expiry, span = res.sent.Add(res.lease.remaining), res.lease.TTL
		if err := renewed(res.lease); err != nil {
			return err
		}
		due = res.sent.Add(span / 3)
	}
}

func notHeld(key string) error {
	return fmt.Errorf("%w: key %q", ErrNotHeld, key)
}

func status(reply []any) int64 {
	if len(reply) == 0 {
		return -100
	}
	n, _ := reply[0].(int64)
	return n
}

func msArg(reply []any, i int) time.Duration {
	if i >= len(reply) {
		return 0
	}
	n, _ := reply[i].(int64)
	return time.Duration(n) * time.Millisecond
}

// parseLease reads {status, lease_id, mode, hold_count, fencing_token,
// ttl_ms, expire_ms, now_ms, owner}.
func parseLease(key string, r []any) (Lease, error) {
	if len(r) != 9 {
		return Lease{}, fmt.Errorf("redislock: unexpected lease reply %v", r)
	}
	id, _ := r[1].(string)
	mode, _ := r[2].(string)
	count, _ := r[3].(int64)
	token, _ := r[4].(int64)
	expire, _ := r[6].(int64)
	now, _ := r[7].(int64)
	owner, _ := r[8].(string)
	return Lease{
		Key:          key,
		ID:           id,
		Owner:        owner,
		Mode:         parseMode(mode),
		FencingToken: uint64(token),
		TTL:          msArg(r, 5),
		ExpireTime:   time.UnixMilli(expire),
		HoldCount:    uint32(count),
		remaining:    time.Duration(expire-now) * time.Millisecond,
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
