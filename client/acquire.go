package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

var (
	// ErrNotAcquired is matched (errors.Is) by the error of an Acquire that
	// did not get the lock in time, or of an AcquirePermit that got no
	// permit; see NotAcquiredError.
	ErrNotAcquired = errors.New("client: lock not acquired")
	// ErrLost is matched by the error of a lease that was lost: its stream
	// ended with NOT_FOUND, or no renewal was confirmed before it would run
	// out.
	ErrLost = errors.New("client: lease lost")
	// ErrReleased is returned by Release of a lease already released.
	ErrReleased = errors.New("client: lease already released")
)

// NotAcquiredError tells that the lock (or every permit of a semaphore)
// was held by others until the wait ended.
type NotAcquiredError struct {
	// Key is the lock's name.
	Key string
	// RetryAfter is how long the current holders' leases still run.
	RetryAfter time.Duration
}

func (e *NotAcquiredError) Error() string {
	return fmt.Sprintf("client: lock %q not acquired (held for another %v)", e.Key, e.RetryAfter)
}

// Is makes a NotAcquiredError match ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Mode is how a lease holds its key.
type Mode int

const (
	// Write is an exclusive hold (the default).
	Write Mode = iota
	// Read is a shared hold: any number of readers, or one writer.
	Read
	// Permit is one of a semaphore's permits (see AcquirePermit).
	Permit
)

// String returns "write", "read" or "permit".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Permit:
		return "permit"
	}
	return "write"
}

// LockOption configures Acquire, and the locks of a Mutex or RWMutex.
type LockOption func(*lockOptions)

type lockOptions struct {
	ttl   time.Duration
	wait  time.Duration // < 0: until the context ends
	owner string
	mode  Mode
	limit uint32 // a semaphore's permits when mode is Permit
}

// WithTTL sets the lease's span; lockd renews it about every ttl/3 while
// held. Unset, lockd's default applies (30s).
func WithTTL(d time.Duration) LockOption { return func(o *lockOptions) { o.ttl = d } }

// WithWait bounds how long Acquire waits for the lock; 0 tries once.
// Unset, it waits until its context ends.
func WithWait(d time.Duration) LockOption { return func(o *lockOptions) { o.wait = max(d, 0) } }

// WithOwner names the holder. The same owner acquiring the same key in the
// same mode re-enters its lease (one more hold; each Release takes one
// away). Unset, each Acquire gets an owner of its own (host:pid:random),
// and its lease is released at once if this process dies.
func WithOwner(owner string) LockOption { return func(o *lockOptions) { o.owner = owner } }

// WithMode asks for a Read or Write hold; default Write.
func WithMode(m Mode) LockOption { return func(o *lockOptions) { o.mode = m } }

// maxWaitChunk bounds one wait asked of lockd when the caller waits for as
// long as its context allows; the client then asks again.
const maxWaitChunk = 30 * time.Second

// Acquire takes key (exclusively, unless WithMode(Read)) and returns a
// lease that keeps itself alive until Release. It waits for the lock until
// ctx ends, or for WithWait's bound; a lock still held by others then gives
// an error matching ErrNotAcquired.
func (c *Client) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lease, error) {
	o := lockOptions{wait: -1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mode == Permit {
		return nil, errors.New("client: Acquire takes locks; take permits with AcquirePermit")
	}
	return c.acquire(ctx, key, o)
}

// AcquirePermit takes one of the limit permits of the semaphore key and
// returns it as a lease that keeps itself alive until Release, like a
// lock's: with its own fencing token, and its Lost channel. At most limit
// permits of key are held at once, by all holders together, who must all
// give the same limit (else FAILED_PRECONDITION). It waits for a permit
// until ctx ends, or for WithWait's bound; none free by then gives an error
// matching ErrNotAcquired. The permit of a holder that dies comes back when
// its lease runs out. WithMode does not apply.
func (c *Client) AcquirePermit(ctx context.Context, key string, limit int, opts ...LockOption) (*Lease, error) {
	if limit < 1 || limit > math.MaxUint32 {
		return nil, fmt.Errorf("client: a semaphore's limit must lie in [1, %d], not %d", uint32(math.MaxUint32), limit)
	}
	o := lockOptions{wait: -1}
	for _, opt := range opts {
		opt(&o)
	}
	o.mode, o.limit = Permit, uint32(limit)
	return c.acquire(ctx, key, o)
}

func (c *Client) acquire(ctx context.Context, key string, o lockOptions) (*Lease, error) {
	owner, madeUp := o.owner, o.owner == ""
	var until time.Time // zero: until ctx ends
	if o.wait >= 0 {
		until = time.Now().Add(o.wait)
	}
	for {
		if madeUp {
			owner = c.newOwner()
		}
		wait := maxWaitChunk
		if !until.IsZero() {
			wait = max(0, time.Until(until))
		}
		// lockd ends a wait a little before the call's deadline: when that
		// comes first, a lock not acquired means the deadline has come.
		dl, hasDeadline := ctx.Deadline()
		lastChunk := hasDeadline && !dl.After(time.Now().Add(wait))
		g, err := c.grant(ctx, key, owner, o, wait)
		if err != nil {
			return nil, err
		}
		if !g.acquired {
			if until.IsZero() && lastChunk {
				return nil, context.DeadlineExceeded
			}
			if until.IsZero() && ctx.Err() == nil {
				continue // one wait ended; the caller's has not
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &NotAcquiredError{Key: key, RetryAfter: g.retryAfter}
		}
		l, err := c.keep(ctx, g, madeUp)
		if errors.Is(err, ErrLost) && ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)) {
			continue // lost before it could be confirmed: try again
		}
		return l, err
	}
}

// granted is the outcome of one grant.
type granted struct {
	acquired   bool
	lease      *lockdv1.Lease
	retryAfter time.Duration
	sent       time.Time // when the first attempt went out: the grant came later
}

// grant asks for the lock once, with one request_id, retried on other
// replicas: a grant whose reply was lost is returned by the retry.
func (c *Client) grant(ctx context.Context, key, owner string, o lockOptions, wait time.Duration) (granted, error) {
	reqID := newID()
	g := granted{sent: time.Now()}
	waitEnd := g.sent.Add(wait)
	var maybeGranted bool
	err := c.retry(ctx, true, func(ctx context.Context, r int) error {
		left := max(0, time.Until(waitEnd))
		actx, cancel := context.WithTimeout(ctx, left+c.opts.callTimeout)
		defer cancel()
		res, err := c.call(actx, r, key, owner, o, left, reqID)
		if err != nil {
			maybeGranted = maybeGranted || mayHaveActed(err)
			return err
		}
		g.acquired, g.lease, g.retryAfter = res.GetAcquired(), res.GetLease(), res.GetRetryAfter().AsDuration()
		return nil
	})
	if err != nil && maybeGranted {
		// A grant may have been made that nobody will claim: take it back.
		c.goUndo(key, owner, o, reqID)
	}
	return g, err
}

// mayHaveActed reports whether a call that failed with err may still have
// been carried out: its answer was lost, or it was cut off.
func mayHaveActed(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied,
		codes.Unauthenticated, codes.ResourceExhausted, codes.Unimplemented, codes.OutOfRange:
		return false
	}
	return true
}

// call sends one Acquire, RLock or SemaphoreService.Acquire to replica r.
func (c *Client) call(ctx context.Context, r int, key, owner string, o lockOptions, wait time.Duration, reqID string) (*lockdv1.AcquireResponse, error) {
	var ttl *durationpb.Duration
	if o.ttl > 0 {
		ttl = durationpb.New(o.ttl)
	}
	lc := c.locks[r]
	switch o.mode {
	case Permit:
		res, err := c.sems[r].Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: key, Limit: o.limit, Owner: owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
		return &lockdv1.AcquireResponse{Acquired: res.GetAcquired(), Lease: res.GetLease(), RetryAfter: res.GetRetryAfter()}, err
	case Read:
		res, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: key, Owner: owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
		return &lockdv1.AcquireResponse{Acquired: res.GetAcquired(), Lease: res.GetLease(), RetryAfter: res.GetRetryAfter()}, err
	}
	return lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
}

// goUndo takes back, in the background, what a request whose outcome is
// unknown may have been granted: the same request_id replays its grant (or
// tries once, with nothing to replay), and one Release takes that hold away.
func (c *Client) goUndo(key, owner string, o lockOptions, reqID string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.callTimeout)
		defer cancel()
		var res *lockdv1.AcquireResponse
		err := c.retry(ctx, true, func(ctx context.Context, r int) error {
			var err error
			res, err = c.call(ctx, r, key, owner, o, 0, reqID)
			return err
		})
		if err == nil && res.GetAcquired() {
			_, _ = c.release(ctx, key, res.GetLease().GetLeaseId())
		}
	}()
}

// release takes one hold away from a lease, with a request_id so a retry
// on another replica does not take two.
func (c *Client) release(ctx context.Context, key, leaseID string) (uint32, error) {
	reqID := newID()
	var n uint32
	err := c.retry(ctx, true, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
		res, err := c.locks[r].Release(actx, &lockdv1.ReleaseRequest{Key: key, LeaseId: leaseID, RequestId: reqID})
		n = res.GetHoldCount()
		return err
	})
	if status.Code(err) == codes.NotFound {
		return 0, fmt.Errorf("%w: %v", ErrLost, err)
	}
	return n, err
}
