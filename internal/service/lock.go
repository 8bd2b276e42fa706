// Package service holds lockd's gRPC handlers: they validate requests, call
// the lock engine or the token broker, and map errors to gRPC status codes.
package service

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
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
	bounds Bounds
	log    *slog.Logger

	waiters atomic.Int64
	streams atomic.Int64
	clients perClient
	leases  leaseBook
	audit   audit

	// drained ends when the server drains.
	drained context.Context
	drain   context.CancelFunc
}

// Option tunes a LockServer.
type Option func(*LockServer)

// WithAudit sends the audit log (who took, released or force-released
// which key) to log; without it nothing is audited.
func WithAudit(log *slog.Logger) Option {
	return func(s *LockServer) { s.audit = audit{log: log} }
}

// NewLockServer returns a LockServer on engine.
func NewLockServer(engine *redislock.Client, bounds Bounds, log *slog.Logger, opts ...Option) *LockServer {
	s := &LockServer{engine: engine, bounds: bounds, log: log}
	s.leases.describe = engine.Describe
	s.drained, s.drain = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	return s
}

// Drain ends every open KeepAlive stream with UNAVAILABLE, without
// releasing its lease, so clients resume on another replica, and ends
// every waiting Acquire, RLock and WLock with UNAVAILABLE, so callers retry
// elsewhere. It is called when the server shuts down.
func (s *LockServer) Drain() {
	s.drain()
}

// KeepAliveStreams reports how many KeepAlive streams are open, with the
// Campaign and Observe streams of the ElectionServers sharing this server.
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
	res, err := s.acquireHeld(ctx, redislock.Write, 0, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.AcquireResponse{Acquired: res.Acquired, Lease: leaseProto(ctx, res), RetryAfter: retryAfter(res), Holder: displayed(ctx, res.Holder)}, nil
}

// WLock takes the key exclusively.
func (s *LockServer) WLock(ctx context.Context, req *lockdv1.WLockRequest) (*lockdv1.WLockResponse, error) {
	res, err := s.acquireHeld(ctx, redislock.Write, 0, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.WLockResponse{Acquired: res.Acquired, Lease: leaseProto(ctx, res), RetryAfter: retryAfter(res), Holder: displayed(ctx, res.Holder)}, nil
}

// RLock takes a shared hold on the key.
func (s *LockServer) RLock(ctx context.Context, req *lockdv1.RLockRequest) (*lockdv1.RLockResponse, error) {
	res, err := s.acquireHeld(ctx, redislock.Read, 0, req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.RLockResponse{Acquired: res.Acquired, Lease: leaseProto(ctx, res), RetryAfter: retryAfter(res), Holder: displayed(ctx, res.Holder)}, nil
}

// acquire takes a lease held for as long as a stream (Hold) stays open.
func (s *LockServer) acquire(ctx context.Context, mode redislock.Mode, req acquireRequest) (redislock.Result, error) {
	return s.acquireLimited(ctx, mode, 0, req, false)
}

// acquireHeld takes a lease that outlives the call (Acquire, RLock, WLock,
// a semaphore's Acquire, with the limit of a Permit): it is counted
// against the client's held leases.
func (s *LockServer) acquireHeld(ctx context.Context, mode redislock.Mode, limit int, req acquireRequest) (redislock.Result, error) {
	return s.acquireLimited(ctx, mode, limit, req, true)
}

// acquireLimited is acquire with the limit of a Permit, counting the lease
// in the book when held is set.
func (s *LockServer) acquireLimited(ctx context.Context, mode redislock.Mode, limit int, req acquireRequest, held bool) (redislock.Result, error) {
	if err := validKey(req.GetKey()); err != nil {
		return redislock.Result{}, err
	}
	if err := validText("owner", req.GetOwner(), maxOwnerBytes); err != nil {
		return redislock.Result{}, err
	}
	if err := validText("request_id", req.GetRequestId(), maxRequestIDBytes); err != nil {
		return redislock.Result{}, err
	}
	ttl, err := s.bounds.ttl("ttl", req.GetTtl(), s.bounds.DefaultTTL)
	if err != nil {
		return redislock.Result{}, err
	}
	wait, err := duration("wait_timeout", req.GetWaitTimeout(), 0)
	if err != nil {
		return redislock.Result{}, err
	}
	if wait > s.bounds.MaxWait {
		return redislock.Result{}, invalid("wait_timeout must be at most %v, got %v", s.bounds.MaxWait, wait)
	}
	// The wait, and every Redis call, ends a little before the caller's
	// deadline, so the answer (acquired=false, or UNAVAILABLE when Redis
	// does not answer) still reaches the caller.
	bctx, cancel := bounded(ctx)
	defer cancel()
	if wait > 0 {
		// A waiter ends when the server drains, so shutdown need not
		// wait for it and the caller retries on another replica.
		var stop func()
		bctx, stop = s.endOnDrain(bctx)
		defer stop()
	}
	owner := ownerFor(ctx, req.GetOwner())
	booked := func(redislock.Result, error) {}
	if held {
		if booked, err = s.leases.reserve(bctx, req.GetKey(), owner, mode, s.bounds.FairShareLeases); err != nil {
			return redislock.Result{}, toStatus(ctx, s.log, err)
		}
	}
	res, err := s.engine.Acquire(bctx, redislock.Request{
		Key: req.GetKey(), Mode: mode, Limit: limit, Owner: owner, NewLeaseID: newLeaseIDFor(ctx),
		TTL: ttl, Wait: wait,
		RequestID: replayableRequestID(ctx, req.GetRequestId(), req.GetOwner()),
		// Only a call that finds the key busy and waits takes a
		// waiter's place; one granted at once never does.
		BeforeWait: func() (func(), error) { return s.takeWaiter(ctx) },
	})
	booked(res, err)
	if err != nil && context.Cause(bctx) == errShuttingDown {
		err = errShuttingDown
	}
	if err == nil && res.Acquired {
		s.audit.took(ctx, shownOwner(ctx, res.Lease))
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
	if !callersLease(ctx, req.GetLeaseId()) {
		return nil, toStatus(ctx, s.log, redislock.NotHeld(req.GetKey()))
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	n, err := s.engine.Release(bctx, req.GetKey(), req.GetLeaseId(), requestIDFor(ctx, req.GetRequestId()))
	if n == 0 && (err == nil || errors.Is(err, redislock.ErrNotHeld)) {
		s.leases.ended(ctx, req.GetLeaseId())
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.audit.released(ctx, req.GetKey(), n, "release")
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
	ttl, err := s.bounds.ttl("ttl", req.GetTtl(), 0)
	if err != nil {
		return nil, err
	}
	if !callersLease(ctx, req.GetLeaseId()) {
		return nil, toStatus(ctx, s.log, redislock.NotHeld(req.GetKey()))
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	l, err := s.engine.Renew(bctx, req.GetKey(), req.GetLeaseId(), ttl)
	if errors.Is(err, redislock.ErrNotHeld) {
		s.leases.ended(ctx, req.GetLeaseId())
	}
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.leases.renewed(ctx, l)
	return &lockdv1.RenewResponse{Lease: toProto(shownOwner(ctx, l))}, nil
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
	ttl, err := s.bounds.ttl("ttl", req.GetTtl(), 0)
	if err != nil {
		return err
	}
	done, err := s.takeKeepAlive(ctx)
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	defer done()
	if !callersLease(ctx, req.GetLeaseId()) {
		return toStatus(ctx, s.log, redislock.NotHeld(req.GetKey()))
	}

	// Renewal never waits on the client reading: leases go out from a
	// sender of their own, which keeps only the newest one unsent.
	out := newLatest(func(l *lockdv1.Lease) error {
		return stream.Send(&lockdv1.KeepAliveResponse{Lease: l})
	})
	keeper := s.engine.NewKeeper(req.GetKey(), req.GetLeaseId())
	// A drain ends the stream without a context of its own: the open
	// streams share the drain's channel.
	keeper.EndOn(s.drained.Done(), errShuttingDown)
	err = keeper.KeepAlive(ctx, ttl, func(l redislock.Lease) error {
		s.leases.renewed(ctx, l)
		out.offer(toProto(shownOwner(ctx, l)))
		return nil
	})
	out.stop()
	if errors.Is(err, redislock.ErrNotHeld) {
		s.leases.ended(ctx, req.GetLeaseId())
	}
	switch {
	case errors.Is(err, errShuttingDown):
		return toStatus(ctx, s.log, errShuttingDown)
	case ctx.Err() != nil:
		// The client closed the stream: renewal stops here. With
		// release_on_close the whole lease goes, unless a newer stream
		// (here or on another replica) keeps it.
		if req.GetReleaseOnClose() {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer rcancel()
			released, err := keeper.Release(rctx)
			if released || errors.Is(err, redislock.ErrNotHeld) {
				s.leases.ended(ctx, req.GetLeaseId())
			}
			switch {
			case errors.Is(err, redislock.ErrNotHeld):
				s.log.DebugContext(ctx, "release on close: the lease was gone already", "key", req.GetKey())
			case err != nil:
				s.log.WarnContext(ctx, "release on close failed", "key", req.GetKey(), "err", err)
			case released:
				s.audit.released(ctx, req.GetKey(), 0, "release_on_close")
			default:
				s.log.DebugContext(ctx, "release on close: a newer KeepAlive keeps the lease", "key", req.GetKey())
			}
		}
		return toStatus(ctx, s.log, ctx.Err())
	}
	return toStatus(ctx, s.log, err)
}

// endOnDrain returns ctx canceled with cause errShuttingDown when the
// server drains; stop releases it.
func (s *LockServer) endOnDrain(ctx context.Context) (context.Context, func()) {
	return endOnDrain(ctx, s.drained)
}

// endOnDrain returns ctx canceled with cause errShuttingDown when drained
// ends; stop releases it. It costs no goroutine while the call runs, which
// matters for the thousands of streams a replica keeps open.
func endOnDrain(ctx context.Context, drained context.Context) (context.Context, func()) {
	dctx, cancel := context.WithCancelCause(ctx)
	unwatch := context.AfterFunc(drained, func() { cancel(errShuttingDown) })
	return dctx, func() {
		unwatch()
		cancel(nil)
	}
}

// limitError is a replica-wide limit, or a client's own when client is set
// (its fair share of the replica's when fair is set).
type limitError struct {
	what   string
	n      int
	client string
	fair   bool
}

func (e *limitError) Error() string {
	if e.client != "" {
		limit := "its limit "
		if e.fair {
			limit = "its fair share, as it has no limit of its own: "
		}
		return "client " + strconv.Quote(e.client) + " has too many " + e.what + " on this replica (" + limit + strconv.Itoa(e.n) + "); retry later"
	}
	return "too many " + e.what + " on this replica (limit " + strconv.Itoa(e.n) + "); retry later or on another replica"
}

func (e *limitError) Unwrap() error { return errLimit }

func leaseProto(ctx context.Context, res redislock.Result) *lockdv1.Lease {
	if !res.Acquired {
		return nil
	}
	return toProto(shownOwner(ctx, res.Lease))
}

func retryAfter(res redislock.Result) *durationpb.Duration {
	if res.Acquired {
		return nil
	}
	return durationpb.New(res.RetryAfter)
}

func toProto(l redislock.Lease) *lockdv1.Lease {
	mode := lockdv1.LockMode_LOCK_MODE_WRITE
	switch l.Mode {
	case redislock.Read:
		mode = lockdv1.LockMode_LOCK_MODE_READ
	case redislock.Permit:
		mode = lockdv1.LockMode_LOCK_MODE_PERMIT
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
