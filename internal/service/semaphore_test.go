package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/service"
)

func TestSemaphoreServiceContract(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, rdb redis.UniversalClient) {
		inst := startCoordination(t, rdb, service.DefaultBounds())
		sc, lc := inst.sem, inst.locks
		ctx := timeout(t, time.Minute)
		take := func(owner string, limit uint32) *lockdv1.SemaphoreServiceAcquireResponse {
			t.Helper()
			res, err := sc.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "wechat/api", Limit: limit, Owner: owner, Ttl: durationpb.New(time.Minute)})
			if err != nil {
				t.Fatalf("permit for %s: %v", owner, err)
			}
			return res
		}
		a := take("a", 2)
		if !a.GetAcquired() || a.GetAvailable() != 1 || a.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_PERMIT ||
			a.GetLease().GetOwner() != "a" || a.GetLease().GetFencingToken() == 0 || a.GetLease().GetHoldCount() != 1 {
			t.Fatalf("first permit = %v", a)
		}
		b := take("b", 2)
		if !b.GetAcquired() || b.GetAvailable() != 0 || b.GetLease().GetLeaseId() == a.GetLease().GetLeaseId() ||
			b.GetLease().GetFencingToken() <= a.GetLease().GetFencingToken() {
			t.Fatalf("second permit = %v", b)
		}
		full := take("c", 2)
		if full.GetAcquired() || full.GetLease() != nil || full.GetAvailable() != 0 || full.GetRetryAfter().AsDuration() < 50*time.Second {
			t.Fatalf("full semaphore = %v", full)
		}
		_, err := sc.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "wechat/api", Limit: 3, Owner: "d"})
		wantCode(t, "another limit", err, codes.FailedPrecondition)
		_, err = lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "wechat/api", Owner: "e"})
		wantCode(t, "a lock of a semaphore", err, codes.FailedPrecondition)

		// Permits are leases: LockService renews, keeps alive and releases them.
		rn, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "wechat/api", LeaseId: b.GetLease().GetLeaseId(), Ttl: durationpb.New(2 * time.Minute)})
		if err != nil || rn.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_PERMIT || rn.GetLease().GetTtl().AsDuration() != 2*time.Minute {
			t.Fatalf("Renew of a permit = %v, %v", rn, err)
		}
		ka, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "wechat/api", LeaseId: b.GetLease().GetLeaseId(), Ttl: durationpb.New(time.Second), ReleaseOnClose: true})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := ka.Recv(); err != nil || m.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_PERMIT {
			t.Fatalf("KeepAlive of a permit = %v, %v", m, err)
		}
		rel, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "wechat/api", LeaseId: a.GetLease().GetLeaseId()})
		if err != nil || rel.GetHoldCount() != 0 {
			t.Fatalf("Release of a permit = %v, %v", rel, err)
		}
		c := take("c", 2)
		if !c.GetAcquired() || c.GetAvailable() != 0 {
			t.Fatalf("permit after a release = %v", c)
		}

		// A lock's key is no semaphore while held.
		w, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "wechat/lock", Owner: "w"})
		if err != nil || !w.GetAcquired() {
			t.Fatal(w, err)
		}
		_, err = sc.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "wechat/lock", Limit: 2})
		wantCode(t, "a permit of a lock", err, codes.FailedPrecondition)

		// Retries with a request_id replay the first permit.
		req := &lockdv1.SemaphoreServiceAcquireRequest{Key: "wechat/retried", Limit: 1, Owner: "r", RequestId: "req-1", Ttl: durationpb.New(time.Minute)}
		first, err := sc.Acquire(ctx, req)
		if err != nil || !first.GetAcquired() {
			t.Fatal(first, err)
		}
		again, err := sc.Acquire(ctx, req)
		if err != nil || again.GetLease().GetLeaseId() != first.GetLease().GetLeaseId() || again.GetLease().GetHoldCount() != 1 {
			t.Fatalf("retried permit = %v, %v; want %v", again, err, first)
		}
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	sc := startCoordination(t, redistest.Start(t).Client(t), service.DefaultBounds()).sem
	ctx := timeout(t, 20*time.Second)
	for _, tc := range []struct {
		name string
		req  *lockdv1.SemaphoreServiceAcquireRequest
		rule string
	}{
		{"no limit", &lockdv1.SemaphoreServiceAcquireRequest{Key: "k"}, "limit must be at least 1"},
		{"a huge limit", &lockdv1.SemaphoreServiceAcquireRequest{Key: "k", Limit: service.MaxPermits + 1}, "limit must be at most"},
		{"an empty key", &lockdv1.SemaphoreServiceAcquireRequest{Limit: 1}, "key must not be empty"},
		{"a ttl above the maximum", &lockdv1.SemaphoreServiceAcquireRequest{Key: "k", Limit: 1, Ttl: durationpb.New(25 * time.Hour)}, "ttl must lie in"},
		{"a negative wait", &lockdv1.SemaphoreServiceAcquireRequest{Key: "k", Limit: 1, WaitTimeout: durationpb.New(-time.Second)}, "wait_timeout must not be negative"},
		{"an oversized request_id", &lockdv1.SemaphoreServiceAcquireRequest{Key: "k", Limit: 1, RequestId: strings.Repeat("r", 129)}, "request_id is 129 bytes"},
	} {
		_, err := sc.Acquire(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.rule) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", tc.name, err, tc.rule)
		}
	}
}

// TestCoordinationAcrossInstances has dozens of goroutines on three lockd
// instances sharing one Redis campaign for one election and take permits of
// one semaphore, counting leaders and permit holders at once.
func TestCoordinationAcrossInstances(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	var insts []coordInstance
	for range 3 {
		insts = append(insts, startCoordination(t, rdb, service.DefaultBounds()))
	}
	ctx := timeout(t, 2*time.Minute)
	const (
		workers = 24
		rounds  = 5
		limit   = 3
	)
	var (
		mu                       sync.Mutex
		leaders, holders         int
		leaderOverlaps, overCap  int
		lastTerm                 uint64
		backwards, terms, grants int
		wg                       sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := insts[w%len(insts)]
			for range rounds {
				// A leader: campaign, lead a moment, close the stream.
				cctx, closeStream := context.WithCancel(ctx)
				st, err := inst.elect.Campaign(cctx, &lockdv1.CampaignRequest{Name: "shared/leader", Owner: fmt.Sprint("w", w)})
				if err != nil {
					closeStream()
					t.Errorf("worker %d: %v", w, err)
					return
				}
				m, err := st.Recv()
				if err != nil {
					closeStream()
					t.Errorf("worker %d: Campaign: %v", w, err)
					return
				}
				mu.Lock()
				leaders++
				terms++
				if leaders > 1 {
					leaderOverlaps++
				}
				if m.GetLeader().GetTerm() <= lastTerm {
					backwards++
				}
				lastTerm = m.GetLeader().GetTerm()
				mu.Unlock()
				time.Sleep(500 * time.Microsecond)
				mu.Lock()
				leaders--
				mu.Unlock()
				closeStream()

				// A permit: take, hold a moment, release.
				res, err := inst.sem.Acquire(ctx, &lockdv1.SemaphoreServiceAcquireRequest{Key: "shared/permits", Limit: limit,
					Owner: fmt.Sprint("w", w), WaitTimeout: durationpb.New(time.Minute)})
				if err != nil || !res.GetAcquired() {
					t.Errorf("worker %d: permit %v, %v", w, res, err)
					return
				}
				mu.Lock()
				holders++
				grants++
				if holders > limit {
					overCap++
				}
				mu.Unlock()
				time.Sleep(500 * time.Microsecond)
				mu.Lock()
				holders--
				mu.Unlock()
				if _, err := inst.locks.Release(ctx, &lockdv1.ReleaseRequest{Key: "shared/permits", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
					t.Errorf("worker %d: release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if leaderOverlaps != 0 || backwards != 0 || overCap != 0 {
		t.Fatalf("%d overlapping leaders, %d terms that did not rise (of %d), %d permits over the limit of %d (of %d)",
			leaderOverlaps, backwards, terms, overCap, limit, grants)
	}
	if terms != workers*rounds || grants != workers*rounds {
		t.Fatalf("%d terms and %d permits, want %d each", terms, grants, workers*rounds)
	}
}
