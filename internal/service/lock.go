// Package service holds lockd's gRPC handlers: they validate requests, call
// the lock engine or the token broker, and map errors to gRPC status codes.
package service

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
)

// LockServer serves lockd.v1.LockService on a redislock engine.
type LockServer struct {
	lockdv1.UnimplementedLockServiceServer

	engine *redislock.Client
	limits Limits
	log    *slog.Logger

	waiters atomic.Int64
	streams atomic.Int64

	drainOnce sync.Once
	drained   chan struct{}
}

// NewLockServer returns a LockServer on engine.
func NewLockServer(engine *redislock.Client, limits Limits, log *slog.Logger) *LockServer {
	return &LockServer{engine: engine, limits: limits, log: log, drained: make(chan struct{})}
}

// Drain ends every open KeepAlive stream with UNAVAILABLE, without
// releasing its lease, so clients resume on another replica, and ends
// every waiting Acquire, RLock and WLock with UNAVAILABLE, so callers retry
// elsewhere. It is called when the server shuts down.
func (s *LockServer) Drain() {
	s.drainOnce.Do(func() { close(s.drained) })
}

// KeepAliveStreams reports how many KeepAlive streams are open.
func (s *LockServer) KeepAliveStreams() int64 { return s.streams.Load() }

// acquireRequest is what AcquireRequest, RLockRequest and WLockRequest share.
type acquireRequest interface {
	GetKey() string
	GetOwner() string
	GetTtl() *durationpb.Duration
	GetWaitTimeout() *durationpb.Duration
	GetRequestId() string
}

// Acquire takes the key exclusively.
func (s *LockServer) Acquire(ctx context.Context, req *lockdv1.AcquireRequest) (*lockdv1.AcquireResponse, error) {
	res, err := s.acquire(ctx, redislock.Write, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.AcquireResponse{Acquired: res.Acquired, Lease: leaseProto(res), RetryAfter: retryAfter(res)}, nil
}

// WLock takes the key exclusively.
func (s *LockServer) WLock(ctx context.Context, req *lockdv1.WLockRequest) (*lockdv1.WLockResponse, error) {
	res, err := s.acquire(ctx, redislock.Write, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.WLockResponse{Acquired: res.Acquired, Lease: leaseProto(res), RetryAfter: retryAfter(res)}, nil
}

// RLock takes a shared hold on the key.
func (s *LockServer) RLock(ctx context.Context, req *lockdv1.RLockRequest) (*lockdv1.RLockResponse, error) {
	res, err := s.acquire(ctx, redislock.Read, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.RLockResponse{Acquired: res.Acquired, Lease: leaseProto(res), RetryAfter: retryAfter(res)}, nil
}

func (s *LockServer) acquire(ctx context.Context, mode redislock.Mode, req acquireRequest) (redislock.Result, error) {
	if err := validKey(req.GetKey()); err != nil {
		return redislock.Result{}, err
	}
	if err := validText("owner", req.GetOwner(), maxOwnerBytes); err != nil {
		return redislock.Result{}, err
	}
	if err := validText("request_id", req.GetRequestId(), maxRequestIDBytes); err != nil {
		return redislock.Result{}, err
	}
	ttl, err := s.limits.ttl("ttl", req.GetTtl(), s.limits.DefaultTTL)
	if err != nil {
		return redislock.Result{}, err
	}
	wait, err := duration("wait_timeout", req.GetWaitTimeout(), 0)
	if err != nil {
		return redislock.Result{}, err
	}
	if wait > s.limits.MaxWait {
		return redislock.Result{}, invalid("wait_timeout must be at most %v, got %v", s.limits.MaxWait, wait)
	}
	// The wait, and every Redis call, ends a little before the caller's
	// deadline, so the answer (acquired=false, or UNAVAILABLE when Redis
	// does not answer) still reaches the caller.
	bctx, cancel := bounded(ctx)
	defer cancel()
	if wait > 0 && s.limits.MaxWaiters > 0 {
		if s.waiters.Add(1) > int64(s.limits.MaxWaiters) {
			s.waiters.Add(-1)
			return redislock.Result{}, toStatus(ctx, s.log, errLimitf("waiters", s.limits.MaxWaiters))
		}
		defer s.waiters.Add(-1)
	}
	if wait > 0 {
		// A waiter ends when the server drains, so shutdown need not
		// wait for it and the caller retries on another replica.
		var stop func()
		bctx, stop = s.endOnDrain(bctx)
		defer stop()
	}
	res, err := s.engine.Acquire(bctx, redislock.Request{
		Key: req.GetKey(), Mode: mode, Owner: req.GetOwner(), TTL: ttl, Wait: wait, RequestID: req.GetRequestId(),
	})
	if err != nil && context.Cause(bctx) == errShuttingDown {
		err = errShuttingDown
	}
	return res, toStatus(ctx, s.log, err)
}

// Release gives back one hold of a lease.
func (s *LockServer) Release(ctx context.Context, req *lockdv1.ReleaseRequest) (*lockdv1.ReleaseResponse, error) {
	if err := validKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if err := validText("request_id", req.GetRequestId(), maxRequestIDBytes); err != nil {
		return nil, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	n, err := s.engine.Release(bctx, req.GetKey(), req.GetLeaseId(), req.GetRequestId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &lockdv1.ReleaseResponse{HoldCount: n}, nil
}

// Renew extends a lease.
func (s *LockServer) Renew(ctx context.Context, req *lockdv1.RenewRequest) (*lockdv1.RenewResponse, error) {
	if err := validKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	ttl, err := s.limits.ttl("ttl", req.GetTtl(), 0)
	if err != nil {
		return nil, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	l, err := s.engine.Renew(bctx, req.GetKey(), req.GetLeaseId(), ttl)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &lockdv1.RenewResponse{Lease: toProto(l)}, nil
}

// KeepAlive renews a lease for as long as the stream stays open.
func (s *LockServer) KeepAlive(req *lockdv1.KeepAliveRequest, stream lockdv1.LockService_KeepAliveServer) error {
	ctx := stream.Context()
	if err := validKey(req.GetKey()); err != nil {
		return err
	}
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return err
	}
	ttl, err := s.limits.ttl("ttl", req.GetTtl(), 0)
	if err != nil {
		return err
	}
	if n := s.streams.Add(1); s.limits.MaxKeepAlives > 0 && n > int64(s.limits.MaxKeepAlives) {
		s.streams.Add(-1)
		return toStatus(ctx, s.log, errLimitf("KeepAlive streams", s.limits.MaxKeepAlives))
	}
	defer s.streams.Add(-1)

	kctx, stop := s.endOnDrain(ctx)
	defer stop()

	err = s.engine.KeepAlive(kctx, req.GetKey(), req.GetLeaseId(), ttl, func(l redislock.Lease) error {
		return stream.Send(&lockdv1.KeepAliveResponse{Lease: toProto(l)})
	})
	switch {
	case context.Cause(kctx) == errShuttingDown:
		return toStatus(ctx, s.log, errShuttingDown)
	case ctx.Err() != nil:
		// The client closed the stream: renewal stops here.
		if req.GetReleaseOnClose() {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer rcancel()
			if _, err := s.engine.Release(rctx, req.GetKey(), req.GetLeaseId(), ""); err != nil {
				s.log.WarnContext(ctx, "release on close failed", "key", req.GetKey(), "err", err)
			}
		}
		return toStatus(ctx, s.log, ctx.Err())
	}
	return toStatus(ctx, s.log, err)
}

// endOnDrain returns ctx canceled with cause errShuttingDown when the
// server drains; stop releases it.
func (s *LockServer) endOnDrain(ctx context.Context) (context.Context, func()) {
	dctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-s.drained:
			cancel(errShuttingDown)
		case <-dctx.Done():
		}
	}()
	return dctx, func() { cancel(nil) }
}

func errLimitf(what string, n int) error {
	return &limitError{what: what, n: n}
}

type limitError struct {
	what string
	n    int
}

func (e *limitError) Error() string {
	return "too many " + e.what + " on this replica (limit " + strconv.Itoa(e.n) + "); retry later or on another replica"
}

func (e *limitError) Unwrap() error { return errLimit }

func leaseProto(res redislock.Result) *lockdv1.Lease {
	if !res.Acquired {
		return nil
	}
	return toProto(res.Lease)
}

func retryAfter(res redislock.Result) *durationpb.Duration {
	if res.Acquired {
		return nil
	}
	return durationpb.New(res.RetryAfter)
}

func toProto(l redislock.Lease) *lockdv1.Lease {
	mode := lockdv1.LockMode_LOCK_MODE_WRITE
	if l.Mode == redislock.Read {
		mode = lockdv1.LockMode_LOCK_MODE_READ
	}
	return &lockdv1.Lease{
		Key:          l.Key,
		LeaseId:      l.ID,
		Owner:        l.Owner,
		Mode:         mode,
		FencingToken: l.FencingToken,
		Ttl:          durationpb.New(l.TTL),
		ExpireTime:   timestamppb.New(l.ExpireTime),
		HoldCount:    l.HoldCount,
	}
}
