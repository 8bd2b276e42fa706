package service

import (
	"context"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
)

// SemaphoreServer serves lockd.v1.SemaphoreService on the lock engine. It
// shares the LockServer's bounds, per-client counts, audit log and drain:
// a permit is a lease like any other, released, renewed and kept alive
// through LockService.
type SemaphoreServer struct {
	lockdv1.UnimplementedSemaphoreServiceServer

	locks *LockServer
}

// NewSemaphoreServer returns a SemaphoreServer sharing locks's engine,
// bounds and drain.
func NewSemaphoreServer(locks *LockServer) *SemaphoreServer {
	return &SemaphoreServer{locks: locks}
}

// MaxPermits bounds a semaphore's limit: each permit held is a lease in the
// key's record.
const MaxPermits = 100000

// Acquire takes one permit of the key.
func (m *SemaphoreServer) Acquire(ctx context.Context, req *lockdv1.SemaphoreServiceAcquireRequest) (*lockdv1.SemaphoreServiceAcquireResponse, error) {
	switch limit := req.GetLimit(); {
	case limit == 0:
		return nil, invalid("limit must be at least 1")
	case limit > MaxPermits:
		return nil, invalid("limit must be at most %d, got %d", MaxPermits, limit)
	}
	res, err := m.locks.acquireHeld(ctx, redislock.Permit, int(req.GetLimit()), req)
	if err != nil {
		return nil, err
	}
	return &lockdv1.SemaphoreServiceAcquireResponse{
		Acquired: res.Acquired, Lease: leaseProto(ctx, res), RetryAfter: retryAfter(res), Available: uint32(res.Available),
	}, nil
}
