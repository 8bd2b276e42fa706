package service

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/ratelimit"
)

// RateLimitServer serves lockd.v1.RateLimitService on a rate limiter. It
// shares the LockServer's bounds (the longest wait, the waiters a client
// and the replica may have), log and drain: a call waiting for its turn is
// a waiter like one waiting for a lock. Keys are authorized against the
// client's lock prefixes by the auth interceptor, as lock keys are.
type RateLimitServer struct {
	lockdv1.UnimplementedRateLimitServiceServer

	engine *ratelimit.Limiter
	locks  *LockServer
}

// NewRateLimitServer returns a RateLimitServer on engine, sharing locks's
// bounds, log and drain.
func NewRateLimitServer(engine *ratelimit.Limiter, locks *LockServer) *RateLimitServer {
	return &RateLimitServer{engine: engine, locks: locks}
}

// Take spends cost from the key's limiter, waiting for its turn up to
// wait_timeout and the deadline.
func (s *RateLimitServer) Take(ctx context.Context, req *lockdv1.TakeRequest) (*lockdv1.TakeResponse, error) {
	if err := validKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validText("request_id", req.GetRequestId(), maxRequestIDBytes); err != nil {
		return nil, err
	}
	if req.GetPeriod() == nil {
		return nil, invalid("period must be set (the span limit applies to, for example 60s)")
	}
	period, err := duration("period", req.GetPeriod(), 0)
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait_timeout", req.GetWaitTimeout(), 0)
	if err != nil {
		return nil, err
	}
	if wait > s.locks.bounds.MaxWait {
		return nil, invalid("wait_timeout must be at most %v, got %v", s.locks.bounds.MaxWait, wait)
	}
	// The wait, and the Redis call, end a little before the caller's
	// deadline, so the answer (allowed=false, or UNAVAILABLE when Redis
	// does not answer) still reaches the caller.
	bctx, cancel := bounded(ctx)
	defer cancel()
	if wait > 0 {
		// A waiter ends when the server drains (its turn given back), so
		// shutdown need not wait for it and the caller retries elsewhere.
		var stop func()
		bctx, stop = s.locks.endOnDrain(bctx)
		defer stop()
	}
	res, err := s.engine.Take(bctx, ratelimit.Request{
		Key:       req.GetKey(),
		Limit:     ratelimit.Limit{Limit: req.GetLimit(), Period: period, Burst: req.GetBurst()},
		Cost:      req.GetCost(),
		Wait:      wait,
		RequestID: requestIDFor(ctx, req.GetRequestId()),
		// Only a call that got a turn to wait for takes a waiter's place.
		BeforeWait: func() (func(), error) { return s.locks.takeWaiter(ctx) },
	})
	if err != nil {
		if context.Cause(bctx) == errShuttingDown {
			err = errShuttingDown
		}
		return nil, toStatus(ctx, s.locks.log, err)
	}
	out := &lockdv1.TakeResponse{Allowed: res.Allowed, Remaining: res.Remaining, ResetAfter: durationpb.New(res.ResetAfter)}
	if !res.Allowed {
		out.RetryAfter = durationpb.New(res.RetryAfter)
	}
	return out, nil
}
