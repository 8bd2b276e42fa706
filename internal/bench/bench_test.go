package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// stack is one Redis, one lock engine on it, and a lockd LockService on a
// loopback TCP port in front of the same engine.
type stack struct {
	rdb    *redis.Client
	engine *redislock.Client
	client lockdv1.LockServiceClient
}

func newStack(b *testing.B) *stack {
	b.Helper()
	rdb := redistest.Start(b).Client(b)
	engine, t := newBareServer(b, rdb)
	return &stack{rdb: rdb, engine: engine, client: t.client}
}

// parallel runs b.N calls of op spread over conc goroutines, each with its
// own worker index, and reports op/s under unit.
func parallel(b *testing.B, conc int, unit string, op func(worker, i int) error) {
	b.ResetTimer()
	start := time.Now()
	err := forEach(b.N, conc, op)
	b.StopTimer()
	if err != nil {
		b.Error(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit)
}

// BenchmarkAcquireRelease measures uncontended Acquire+Release pairs (each
// worker on its own key) through gRPC, and the same engine calling the same
// Lua scripts straight on the same Redis: the difference is the gRPC hop.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("path=direct/conc=%d", conc), func(b *testing.B) {
			s := newStack(b)
			ctx := context.Background()
			parallel(b, conc, "pairs/s", func(w, _ int) error {
				key := fmt.Sprint("bench/", w)
				res, err := s.engine.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: key, TTL: 30 * time.Second})
				if err != nil || !res.Acquired {
					return fmt.Errorf("acquire: %v %v", res, err)
				}
				_, err = s.engine.Release(ctx, key, res.Lease.ID, "")
				return err
			})
		})
		b.Run(fmt.Sprintf("path=grpc/conc=%d", conc), func(b *testing.B) {
			s := newStack(b)
			ctx := context.Background()
			parallel(b, conc, "pairs/s", func(w, _ int) error {
				key := fmt.Sprint("bench/", w)
				res, err := s.client.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: key})
				if err != nil || !res.GetAcquired() {
					return fmt.Errorf("acquire: %v %v", res, err)
				}
				_, err = s.client.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()})
				return err
			})
		})
	}
}

// BenchmarkHandoff measures handoff through gRPC: 16 waiters want one
// key; each holder keeps it 2 ms, releases, and goes to the back of the
// line. The time from the start of its Release call to the next waiter's
// grant is recorded (an upper bound on release-acknowledged-to-grant):
// p50-ms and p99-ms, with holds/s and the spread of waits. Compared with
// waiters that sleep 100 ms between tries, as the classic Redis lock
// recipes do.
func BenchmarkHandoff(b *testing.B) {
	for _, v := range []struct {
		name string
		svc  func(lockTarget) lockService
	}{
		{"pubsub", func(t lockTarget) lockService { return lockdService{t: t} }},
		{"poll100ms", func(t lockTarget) lockService { return pollService{t: t, every: 100 * time.Millisecond} }},
	} {
		b.Run("waiters=16/wake="+v.name, func(b *testing.B) {
			defer fixedShape(b)()
			s := newStack(b)
			c, err := contend(sessions(b, v.svc(lockTarget{client: s.client}), 16), "handoff", 2*time.Millisecond, 500*time.Millisecond, benchTime(), func(bool) {})
			if err != nil {
				b.Fatal(err)
			}
			c.report(b, "")
		})
	}
}

// BenchmarkKeepAliveRenewal measures one renewal through the engine.
func BenchmarkRenew(b *testing.B) {
	s := newStack(b)
	ctx := context.Background()
	res, err := s.engine.Acquire(ctx, redislock.Request{Key: "renew", Mode: redislock.Write, TTL: time.Minute})
	if err != nil || !res.Acquired {
		b.Fatal(res, err)
	}
	parallel(b, 16, "renewals/s", func(int, int) error {
		_, err := s.engine.Renew(ctx, "renew", res.Lease.ID, 0)
		return err
	})
}
