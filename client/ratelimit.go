package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Rate is a fleet-wide rate limit (lockd's RateLimitService): for a key, in
// any window of length t, at most Burst + Limit × t / Period cost is
// allowed, however many processes take from it. Every caller of a key must
// give the same Rate while the key's limiter is in use (else
// FAILED_PRECONDITION): a misconfigured caller cannot widen a limit.
type Rate struct {
	// Limit is how much cost is allowed per Period; at least 1.
	Limit uint32
	// Period is the span Limit applies to: from 1ms to 366 days.
	Period time.Duration
	// Burst is how much cost an idle limiter allows at once; 0 means
	// Limit.
	Burst uint32
}

// Decision is a rate limiter's answer.
type Decision struct {
	// Allowed is true when the cost was spent: go ahead.
	Allowed bool
	// Remaining is how much more cost the limiter would allow at once.
	Remaining uint32
	// RetryAfter is, when not allowed, how long until the cost would be
	// allowed if nobody else took from the key meanwhile.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is full again.
	ResetAfter time.Duration
}

// ErrRateLimited is matched (errors.Is) by the error of a Wait whose turn
// would come after its context's deadline; see RateLimitedError.
var ErrRateLimited = errors.New("client: rate limited")

// RateLimitedError tells that a Wait's cost would be allowed only after
// its deadline. lockd says so at once, rather than at the deadline.
type RateLimitedError struct {
	// Key is the limiter's name.
	Key string
	// RetryAfter is how long until the cost would be allowed if nobody
	// else took from the key meanwhile.
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("client: rate limit %q: not allowed before the deadline (allowed in %v)", e.Key, e.RetryAfter)
}

// Is makes a RateLimitedError match ErrRateLimited.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// TakeOption configures Take and Wait: WithCost.
type TakeOption interface {
	applyTake(*takeOptions)
}

type takeOptions struct {
	cost uint32 // 0: lockd's default, 1
}

type costOption uint32

func (o costOption) applyTake(t *takeOptions) { t.cost = uint32(o) }

// WithCost spends n instead of 1 (for example the items of a batch call);
// it must not pass the rate's burst.
func WithCost(n uint32) TakeOption { return costOption(n) }

// Take spends the cost (1, or WithCost's) from the limiter of key if rate
// allows it now. Not allowed is a Decision, not an error.
func (c *Client) Take(ctx context.Context, key string, rate Rate, opts ...TakeOption) (Decision, error) {
	return c.take(ctx, key, rate, opts, 0)
}

// Wait spends the cost (1, or WithCost's) from the limiter of key, waiting
// for its turn as long as ctx allows: lockd keeps its place among the
// waiters and answers when the turn comes, without polling. A turn that
// would come after ctx's deadline gives an error matching ErrRateLimited
// at once. Without a deadline, a turn further away than a wait lockd
// grants at once (30s) is awaited here, then asked for again.
func (c *Client) Wait(ctx context.Context, key string, rate Rate, opts ...TakeOption) (Decision, error) {
	for {
		wait := maxWaitChunk
		dl, hasDeadline := ctx.Deadline()
		if hasDeadline {
			wait = max(time.Until(dl), 0)
		}
		d, err := c.take(ctx, key, rate, opts, wait)
		if err != nil || d.Allowed {
			return d, err
		}
		if hasDeadline {
			return d, &RateLimitedError{Key: key, RetryAfter: d.RetryAfter}
		}
		// Ask again once the turn is within a wait lockd grants.
		if err := sleep(ctx, max(d.RetryAfter-maxWaitChunk/2, 0)); err != nil {
			return d, err
		}
	}
}

// take asks once, with one request_id, retried on other replicas: a
// decision whose reply was lost is returned by the retry instead of
// spending twice.
func (c *Client) take(ctx context.Context, key string, rate Rate, opts []TakeOption, wait time.Duration) (Decision, error) {
	var o takeOptions
	for _, opt := range opts {
		opt.applyTake(&o)
	}
	req := &lockdv1.TakeRequest{Key: key, Limit: rate.Limit, Period: durationpb.New(rate.Period), Burst: rate.Burst,
		Cost: o.cost, RequestId: newID()}
	waitEnd := time.Now().Add(wait)
	var d Decision
	err := c.retry(ctx, true, func(ctx context.Context, r int) error {
		left := max(0, time.Until(waitEnd))
		if wait > 0 {
			req.WaitTimeout = durationpb.New(left)
		}
		actx, cancel := context.WithTimeout(ctx, left+c.opts.callTimeout)
		defer cancel()
		res, err := lockdv1.NewRateLimitServiceClient(c.conns[r]).Take(actx, req)
		if err != nil {
			return err
		}
		d = Decision{Allowed: res.GetAllowed(), Remaining: res.GetRemaining(),
			RetryAfter: res.GetRetryAfter().AsDuration(), ResetAfter: res.GetResetAfter().AsDuration()}
		return nil
	})
	return d, err
}
