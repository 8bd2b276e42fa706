package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// The benchmark loops (harness_test.go) drive lockd and etcd alike: each
// lock service is a lockService, each benchmark worker a session of it.

// lockService is a lock service as the benchmark loops drive it.
type lockService interface {
	// session prepares worker w to take locks (etcd: grants its lease).
	session(ctx context.Context, w int) (session, error)
}

// session is one worker's handle on a lock service.
type session interface {
	// lock blocks until the worker holds key and returns the call that
	// gives it back.
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	// close gives back what the session holds (etcd: revokes its lease).
	close(ctx context.Context) error
}

// noopService is a server's cheapest unary call: its gRPC ceiling.
type noopService interface {
	noop(ctx context.Context) error
}

// lockdWait bounds every blocking Acquire of the benchmarks.
var lockdWait = durationpb.New(time.Minute)

// lockdService drives lockd's LockService through t; health, when set,
// serves noop as grpc.health.v1.Health/Check on the same server.
type lockdService struct {
	t      lockTarget
	health healthpb.HealthClient
}

func (s lockdService) session(_ context.Context, w int) (session, error) {
	return lockdSession{t: s.t, owner: fmt.Sprint("worker-", w)}, nil
}

func (s lockdService) noop(ctx context.Context) error {
	_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// spread hands out the sessions of its services in turn: workers spread
// over several connections, as many clients' calls would be.
type spread []lockService

func (s spread) session(ctx context.Context, w int) (session, error) {
	return s[w%len(s)].session(ctx, w)
}

// lockdSession takes locks as one owner, waiting for them (as etcd's Lock
// does); an uncontended Acquire with a wait costs what a try-once does.
type lockdSession struct {
	t     lockTarget
	owner string
}

func (s lockdSession) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	if s.t.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, s.t.md)
	}
	res, err := s.t.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: s.owner, WaitTimeout: lockdWait})
	if err != nil {
		return nil, err
	}
	if !res.GetAcquired() {
		return nil, fmt.Errorf("lockd: %s not acquired within %v", key, lockdWait.AsDuration())
	}
	id := res.GetLease().GetLeaseId()
	return func(ctx context.Context) error {
		if s.t.md != nil {
			ctx = metadata.NewOutgoingContext(ctx, s.t.md)
		}
		_, err := s.t.client.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: id})
		return err
	}, nil
}

func (lockdSession) close(context.Context) error { return nil }

// pollService takes lockd locks the way the classic Redis lock recipes do:
// try, and sleep every between tries. Pollers are not in step with each
// other: each starts after a random part of every.
type pollService struct {
	t     lockTarget
	every time.Duration
}

func (s pollService) session(_ context.Context, w int) (session, error) {
	return pollSession{t: s.t, owner: fmt.Sprint("poller-", w), every: s.every}, nil
}

type pollSession struct {
	t     lockTarget
	owner string
	every time.Duration
}

func (s pollSession) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	time.Sleep(rand.N(s.every))
	for {
		res, err := s.t.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: s.owner})
		if err != nil {
			return nil, err
		}
		if res.GetAcquired() {
			id := res.GetLease().GetLeaseId()
			return func(ctx context.Context) error {
				_, err := s.t.client.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: id})
				return err
			}, nil
		}
		select {
		case <-time.After(s.every):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (pollSession) close(context.Context) error { return nil }

// etcdLeaseTTL is the ttl of each etcd worker's lease: longer than any
// benchmark, so that no lease needs keeping alive while it is measured.
const etcdLeaseTTL = 600

// etcdService drives etcd's own lock service: v3lock Lock and Unlock with
// a lease from the Lease service. Each session grants one lease up front
// and takes every lock with it, as etcd's concurrency.Session does, so a
// pair is two RPCs (Lock, Unlock) on etcd as on lockd (Acquire, Release),
// where lockd's Acquire makes its lease itself. noop is
// Maintenance.Status: answered from the member's memory, without a raft
// round or a disk access.
type etcdService struct {
	locks  v3lockpb.LockClient
	leases etcdpb.LeaseClient
	maint  etcdpb.MaintenanceClient
}

func (s etcdService) session(ctx context.Context, _ int) (session, error) {
	res, err := s.leases.LeaseGrant(ctx, &etcdpb.LeaseGrantRequest{TTL: etcdLeaseTTL})
	if err != nil {
		return nil, err
	}
	return etcdSession{s: s, lease: res.GetID()}, nil
}

func (s etcdService) noop(ctx context.Context) error {
	_, err := s.maint.Status(ctx, &etcdpb.StatusRequest{})
	return err
}

type etcdSession struct {
	s     etcdService
	lease int64
}

func (e etcdSession) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	res, err := e.s.locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(key), Lease: e.lease})
	if err != nil {
		return nil, err
	}
	held := res.GetKey()
	return func(ctx context.Context) error {
		_, err := e.s.locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: held})
		return err
	}, nil
}

func (e etcdSession) close(ctx context.Context) error {
	_, err := e.s.leases.LeaseRevoke(ctx, &etcdpb.LeaseRevokeRequest{ID: e.lease})
	return err
}
