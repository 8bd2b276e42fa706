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
	// ErrLocked is matched (errors.Is) by the error of an Acquire,
	// AcquireRead, AcquirePermit, TryLock or TryRLock that found the key
	// held by others (for a semaphore: every permit) until its wait ended;
	// the error is a *LockedError.
	ErrLocked = errors.New("client: locked by another owner")
	// ErrLost is matched by the error of a lease that was lost: its stream
	// ended with NOT_FOUND, or no renewal was confirmed before it would run
	// out.
	ErrLost = errors.New("client: lease lost")
	// ErrReleased is returned by Release of a lease already released.
	ErrReleased = errors.New("client: lease already released")
)

// LockedError tells that a key (or every permit of a semaphore) was held
// by others until the wait ended, who holds it, and for how long.
type LockedError struct {
	// Key is the lock's name.
	Key string
	// Holder names an owner holding the key (the writer, or one of the
	// readers) as it named itself. It is empty for a semaphore, and when
	// the key is kept back though nobody holds it (a writer waits for it,
	// or Redis lost its data).
	Holder string
	// RetryAfter is how long the holders' leases still run, unless renewed.
	RetryAfter time.Duration
}

// Error names the key, its holder and how long it is still held.
func (e *LockedError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("client: %q is locked (for another %v)", e.Key, e.RetryAfter)
	}
	return fmt.Sprintf("client: %q is locked by %q (for another %v)", e.Key, e.Holder, e.RetryAfter)
}

// Is makes a LockedError match ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Mode is how a lease holds its key.
type Mode int

const (
	// Write is an exclusive hold (Acquire, Mutex, RWMutex.Lock).
	Write Mode = iota
	// Read is a shared hold (AcquireRead, RWMutex.RLock): any number of
	// readers, or one writer.
	Read
	// Permit is one of a semaphore's permits (AcquirePermit).
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

// maxWaitChunk bounds one wait asked of lockd when the caller waits for as
// long as its context allows; the client then asks again.
const maxWaitChunk = 30 * time.Second

// Acquire takes key exclusively and returns a lease that keeps itself alive
// until Release. It waits for the lock until ctx ends, or for WithWait's
// bound; a key still held by others then gives an error matching
// ErrLocked.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, key, Write, 0, acquireOptions(opts))
}

// AcquireRead takes a shared hold on key, as one of any number of readers,
// and returns a lease that keeps itself alive until Release. While a writer
// holds or waits for the key, readers wait, so writers do not starve. It
// waits like Acquire.
func (c *Client) AcquireRead(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, key, Read, 0, acquireOptions(opts))
}

// AcquirePermit takes one of the limit permits of the semaphore key and
// returns it as a lease that keeps itself alive until Release, like a
// lock's: with its own fencing token, and its Lost channel. At most limit
// permits of key are held at once, by all holders together, who must all
// give the same limit (else FAILED_PRECONDITION). It waits for a permit
// until ctx ends, or for WithWait's bound; none free by then gives an error
// matching ErrLocked. The permit of a holder that dies comes back when its
// lease runs out.
func (c *Client) AcquirePermit(ctx context.Context, key string, limit int, opts ...AcquireOption) (*Lease, error) {
	if limit < 1 || limit > math.MaxUint32 {
		return nil, fmt.Errorf("client: a semaphore's limit must lie in [1, %d], not %d", uint32(math.MaxUint32), limit)
	}
	return c.acquire(ctx, key, Permit, uint32(limit), acquireOptions(opts))
}

// lockRequest is what one acquisition asks lockd for.
type lockRequest struct {
	key   string
	mode  Mode
	limit uint32 // a semaphore's permits, for Permit
	owner string
	ttl   time.Duration // 0: lockd's default
}

func (c *Client) acquire(ctx context.Context, key string, mode Mode, limit uint32, o leaseOptions) (*Lease, error) {
	req := lockRequest{key: key, mode: mode, limit: limit, owner: o.owner, ttl: o.ttl}
	madeUp := o.owner == ""
	var until time.Time // zero: until ctx ends
	if o.wait >= 0 {
		until = time.Now().Add(o.wait)
	}
	for {
		if madeUp {
			req.owner = c.newOwner()
		}
		wait := maxWaitChunk
		if !until.IsZero() {
			wait = max(0, time.Until(until))
		}
		// lockd ends a wait a little before the call's deadline: when that
		// comes first, a lock not acquired means the deadline has come.
		dl, hasDeadline := ctx.Deadline()
		lastChunk := hasDeadline && !dl.After(time.Now().Add(wait))
		g, err := c.grant(ctx, req, wait)
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
			return nil, &LockedError{Key: key, Holder: g.holder, RetryAfter: g.retryAfter}
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
	holder     string
	retryAfter time.Duration
	sent       time.Time // when the first attempt went out: the grant came later
}

// grant asks for the lock once, with one request_id, retried on other
// replicas: a grant whose reply was lost is returned by the retry.
func (c *Client) grant(ctx context.Context, req lockRequest, wait time.Duration) (granted, error) {
	reqID := newID()
	g := granted{sent: time.Now()}
	waitEnd := g.sent.Add(wait)
	var maybeGranted bool
	err := c.retry(ctx, true, func(ctx context.Context, r int) error {
		left := max(0, time.Until(waitEnd))
		actx, cancel := context.WithTimeout(ctx, left+c.opts.callTimeout)
		defer cancel()
		res, err := c.call(actx, r, req, left, reqID)
		if err != nil {
			maybeGranted = maybeGranted || mayHaveActed(err)
			return err
		}
		g.acquired, g.lease, g.holder, g.retryAfter = res.GetAcquired(), res.GetLease(), res.GetHolder(), res.GetRetryAfter().AsDuration()
		return nil
	})
	if err != nil && maybeGranted {
		// A grant may have been made that nobody will claim: take it back.
		c.goUndo(req, reqID)
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
func (c *Client) call(ctx context.Context, r int, req lockRequest, wait time.Duration, reqID string) (*lockdv1.AcquireResponse, error) {
	var ttl *durationpb.Duration
	if req.ttl > 0 {
		ttl = durationpb.New(req.ttl)
	}
	lc := c.locks[r]
	switch req.mode {
	case Permit:
		res, err := c.sems[r].Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: req.key, Limit: req.limit, Owner: req.owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
		return &lockdv1.AcquireResponse{Acquired: res.GetAcquired(), Lease: res.GetLease(), RetryAfter: res.GetRetryAfter()}, err
	case Read:
		res, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: req.key, Owner: req.owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
		return &lockdv1.AcquireResponse{Acquired: res.GetAcquired(), Lease: res.GetLease(), RetryAfter: res.GetRetryAfter(), Holder: res.GetHolder()}, err
	}
	return lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: req.key, Owner: req.owner, Ttl: ttl, WaitTimeout: durationpb.New(wait), RequestId: reqID})
}

// goUndo takes back, in the background, what a request whose outcome is
// unknown may have been granted: the same request_id replays its grant (or
// tries once, with nothing to replay), and one Release takes that hold away.
func (c *Client) goUndo(req lockRequest, reqID string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.callTimeout)
		defer cancel()
		var res *lockdv1.AcquireResponse
		err := c.retry(ctx, true, func(ctx context.Context, r int) error {
			var err error
			res, err = c.call(ctx, r, req, 0, reqID)
			return err
		})
		if err == nil && res.GetAcquired() {
			_, _ = c.release(ctx, req.key, res.GetLease().GetLeaseId())
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
