package service

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
)

// Hold takes the key, keeps it for as long as the stream stays open, and
// releases the whole lease when the client closes the stream (unless a
// newer KeepAlive has taken the lease over).
func (s *LockServer) Hold(req *lockdv1.HoldRequest, stream lockdv1.LockService_HoldServer) error {
	ctx := stream.Context()
	if err := validKey(req.GetKey()); err != nil {
		return err
	}
	mode, err := holdMode(req.GetMode())
	if err != nil {
		return err
	}
	// A Hold is a KeepAlive stream from the start: it counts against the
	// same limit before it may wait or take anything.
	done, err := s.takeKeepAlive(ctx)
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	defer done()

	res, err := s.acquire(ctx, mode, holdAcquire{req})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return stream.Send(&lockdv1.HoldResponse{RetryAfter: retryAfter(res), Holder: displayed(ctx, res.Holder)})
	}
	lease := res.Lease

	kctx, stop := s.endOnDrain(ctx)
	defer stop()
	// Renewals reach the client through a sender that keeps only the
	// newest lease unsent: renewal never waits on the client reading.
	out := newLatest(func(l *lockdv1.Lease) error {
		return stream.Send(&lockdv1.HoldResponse{Acquired: true, Lease: l})
	})
	// The first response goes out once the first renewal has made this
	// stream the lease's keeper: until then nobody else knows the lease,
	// and from then on a KeepAlive resuming it elsewhere supersedes it.
	var registered atomic.Bool
	keeper := s.engine.NewKeeper(lease.Key, lease.ID)
	err = keeper.KeepAlive(kctx, 0, func(l redislock.Lease) error {
		registered.Store(true)
		out.offer(toProto(shownOwner(ctx, l)))
		return nil
	})
	out.stop()
	switch {
	case !registered.Load():
		// The client never heard of the lease: take back the hold this
		// call added.
		s.undoHold(ctx, lease.Key, lease.ID)
	case context.Cause(kctx) == errShuttingDown:
		// The lease stays held: the client resumes with KeepAlive on
		// another replica, or lets it run out.
		return toStatus(ctx, s.log, errShuttingDown)
	case ctx.Err() != nil:
		// The client closed the stream: the whole lease goes, unless a
		// newer KeepAlive (here or on another replica) keeps it.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		switch released, err := keeper.Release(rctx); {
		case errors.Is(err, redislock.ErrNotHeld):
		case err != nil:
			s.log.WarnContext(ctx, "release of a closed Hold failed", "key", lease.Key, "err", err)
		case released:
			s.audit.released(ctx, lease.Key, 0, "hold_close")
		}
	}
	if ctx.Err() != nil {
		return toStatus(ctx, s.log, ctx.Err())
	}
	if context.Cause(kctx) == errShuttingDown {
		return toStatus(ctx, s.log, errShuttingDown)
	}
	return toStatus(ctx, s.log, err)
}

// holdAcquire gives a HoldRequest the shape of the other acquire requests.
// A Hold has no request_id: its stream is the call.
type holdAcquire struct{ *lockdv1.HoldRequest }

func (holdAcquire) GetRequestId() string { return "" }

// holdMode reads a HoldRequest's mode; unspecified means write.
func holdMode(m lockdv1.LockMode) (redislock.Mode, error) {
	switch m {
	case lockdv1.LockMode_LOCK_MODE_UNSPECIFIED, lockdv1.LockMode_LOCK_MODE_WRITE:
		return redislock.Write, nil
	case lockdv1.LockMode_LOCK_MODE_READ:
		return redislock.Read, nil
	}
	return 0, invalid("mode must be LOCK_MODE_READ or LOCK_MODE_WRITE, got %v", m)
}

// undoHold takes back the hold a Hold was granted when the Hold ended
// before it told its client, even though the stream's own context is done.
func (s *LockServer) undoHold(ctx context.Context, key, leaseID string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	n, err := s.engine.Release(rctx, key, leaseID, "")
	switch {
	case errors.Is(err, redislock.ErrNotHeld):
	case err != nil:
		s.log.WarnContext(ctx, "undo of a Hold's grant failed", "key", key, "err", err)
	default:
		s.audit.released(ctx, key, n, "hold_undone")
	}
}
