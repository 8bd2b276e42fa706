package service

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
)

// ElectionServer serves lockd.v1.ElectionService on the lock engine. It
// shares the LockServer's bounds, per-client counts, audit log and drain:
// a Campaign stream counts as a KeepAlive stream for its whole life (and as
// a waiter while it waits to be elected), an Observe stream as a KeepAlive
// stream.
type ElectionServer struct {
	lockdv1.UnimplementedElectionServiceServer

	locks *LockServer
}

// NewElectionServer returns an ElectionServer sharing locks's engine,
// bounds and drain.
func NewElectionServer(locks *LockServer) *ElectionServer {
	return &ElectionServer{locks: locks}
}

// campaignRetry bounds the pause before a candidate whose wait was cut
// short by Redis (unreachable, failing over) waits again.
const campaignRetry = time.Second

// Campaign waits until the candidate is elected, then keeps its leadership
// for as long as the stream stays open, and resigns when it closes.
func (e *ElectionServer) Campaign(req *lockdv1.CampaignRequest, stream lockdv1.ElectionService_CampaignServer) error {
	s := e.locks
	ctx := stream.Context()
	if err := validName(req.GetName()); err != nil {
		return err
	}
	if err := validValue(req.GetValue()); err != nil {
		return err
	}
	if err := validText("owner", req.GetOwner(), maxOwnerBytes); err != nil {
		return err
	}
	ttl, err := s.bounds.ttl("ttl", req.GetTtl(), s.bounds.DefaultTTL)
	if err != nil {
		return err
	}
	done, err := s.takeKeepAlive(ctx)
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	defer done()
	kctx, stop := s.endOnDrain(ctx)
	defer stop()

	lead, err := e.elect(ctx, kctx, redislock.CampaignRequest{
		Name: req.GetName(), Value: req.GetValue(), Owner: ownerFor(ctx, req.GetOwner()), NewLeaseID: newLeaseIDFor(ctx), TTL: ttl,
		BeforeWait: func() (func(), error) { return s.takeWaiter(ctx) },
	})
	if err != nil {
		if context.Cause(kctx) == errShuttingDown {
			err = errShuttingDown
		}
		return toStatus(ctx, s.log, err)
	}
	leaseID := lead.LeaseID()
	first := lead.Leader()
	s.audit.took(ctx, redislock.Lease{Key: first.Name, Owner: displayed(ctx, first.Owner), Mode: redislock.Write,
		FencingToken: first.Term, TTL: first.TTL})

	// Renewals never wait on the client reading (see latest).
	out := newLatest(func(l *lockdv1.Leader) error {
		return stream.Send(&lockdv1.CampaignResponse{Leader: l})
	})
	out.offer(leaderProto(ctx, first, leaseID))
	err = lead.Keep(kctx, func(l redislock.Leader) {
		out.offer(leaderProto(ctx, l, leaseID))
	})
	out.stop()
	switch {
	case context.Cause(kctx) == errShuttingDown:
		// The leadership stays: the client campaigns again on another
		// replica with the same owner and resumes it.
		return toStatus(ctx, s.log, errShuttingDown)
	case ctx.Err() != nil:
		// The client closed the stream: the leader resigns at once,
		// unless a newer campaign (a resumption) keeps the leadership.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		switch resigned, err := lead.Resign(rctx); {
		case errors.Is(err, redislock.ErrNotHeld):
			s.log.DebugContext(ctx, "resign on close: the leadership was over already", "name", first.Name)
		case err != nil:
			s.log.WarnContext(ctx, "resign on close failed", "name", first.Name, "err", err)
		case resigned:
			s.audit.released(ctx, first.Name, 0, "resign_on_close")
		}
		return toStatus(ctx, s.log, ctx.Err())
	}
	return toStatus(ctx, s.log, err)
}

// elect runs the engine's Campaign until the candidate is elected, waiting
// again when Redis cut a wait short: nothing is held while waiting, so the
// candidate only loses its place.
func (e *ElectionServer) elect(ctx, kctx context.Context, req redislock.CampaignRequest) (*redislock.Leadership, error) {
	for {
		lead, err := e.locks.engine.Campaign(kctx, req)
		if err == nil || !transient(err) || kctx.Err() != nil {
			return lead, err
		}
		e.locks.log.DebugContext(ctx, "campaign: waiting again after a Redis error", "name", req.Name, "err", err)
		select {
		case <-time.After(campaignRetry):
		case <-kctx.Done():
			return nil, context.Cause(kctx)
		}
	}
}

// Leader returns the election's current leader.
func (e *ElectionServer) Leader(ctx context.Context, req *lockdv1.LeaderRequest) (*lockdv1.LeaderResponse, error) {
	s := e.locks
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	l, err := s.engine.Leader(bctx, req.GetName())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &lockdv1.LeaderResponse{Leader: leaderProto(ctx, l, "")}, nil
}

// Observe streams the election's states.
func (e *ElectionServer) Observe(req *lockdv1.ObserveRequest, stream lockdv1.ElectionService_ObserveServer) error {
	s := e.locks
	ctx := stream.Context()
	if err := validName(req.GetName()); err != nil {
		return err
	}
	done, err := s.takeKeepAlive(ctx)
	if err != nil {
		return toStatus(ctx, s.log, err)
	}
	defer done()
	kctx, stop := s.endOnDrain(ctx)
	defer stop()

	out := newLatest(func(m *lockdv1.ObserveResponse) error { return stream.Send(m) })
	err = s.engine.Observe(kctx, req.GetName(), func(o redislock.Observation) error {
		m := &lockdv1.ObserveResponse{HasLeader: o.Elected}
		if o.Elected {
			m.Leader = leaderProto(ctx, o.Leader, "")
		}
		out.offer(m)
		return nil
	})
	out.stop()
	if context.Cause(kctx) == errShuttingDown {
		err = errShuttingDown
	}
	return toStatus(ctx, s.log, err)
}

// Proclaim sets the leader's value.
func (e *ElectionServer) Proclaim(ctx context.Context, req *lockdv1.ProclaimRequest) (*lockdv1.ProclaimResponse, error) {
	s := e.locks
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if err := validValue(req.GetValue()); err != nil {
		return nil, err
	}
	if !callersLease(ctx, req.GetLeaseId()) {
		return nil, toStatus(ctx, s.log, redislock.NotHeld(req.GetName()))
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	l, err := s.engine.Proclaim(bctx, req.GetName(), req.GetLeaseId(), req.GetValue())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &lockdv1.ProclaimResponse{Leader: leaderProto(ctx, l, req.GetLeaseId())}, nil
}

// Resign ends a leadership.
func (e *ElectionServer) Resign(ctx context.Context, req *lockdv1.ResignRequest) (*lockdv1.ResignResponse, error) {
	s := e.locks
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	if err := validLeaseID(req.GetLeaseId()); err != nil {
		return nil, err
	}
	if !callersLease(ctx, req.GetLeaseId()) {
		return nil, toStatus(ctx, s.log, redislock.NotHeld(req.GetName()))
	}
	bctx, cancel := bounded(ctx)
	defer cancel()
	if err := s.engine.Resign(bctx, req.GetName(), req.GetLeaseId()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	s.audit.released(ctx, req.GetName(), 0, "resign")
	return &lockdv1.ResignResponse{}, nil
}

// leaderProto is l as a caller sees it; leaseID is set only for the
// leader itself.
func leaderProto(ctx context.Context, l redislock.Leader, leaseID string) *lockdv1.Leader {
	return &lockdv1.Leader{
		Name:       l.Name,
		Value:      l.Value,
		Owner:      displayed(ctx, l.Owner),
		Term:       l.Term,
		LeaseId:    leaseID,
		ExpireTime: timestamppb.New(l.ExpireTime),
	}
}

func validName(name string) error {
	if err := redislock.ValidateName(name); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func validValue(v string) error {
	if len(v) > redislock.MaxValueBytes {
		return invalid("value is %d bytes, longer than %d", len(v), redislock.MaxValueBytes)
	}
	return nil
}
