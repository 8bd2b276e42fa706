package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestSentinelFailover runs lockd on a Sentinel deployment (1 master, 1
// replica, 3 sentinels) through a forced failover: lockd keeps serving once
// the new master is in place (after the data-loss grace, shortened here),
// and fencing tokens keep rising across it.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	p := startLockd(t, nil, "--redis="+strings.Join(st.SentinelAddrs(), ","), "--redis-master="+st.MasterName(), "--data-loss-grace=2s")
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var last uint64
	// cycle takes and gives back the lock, retrying while the failover
	// makes Redis unavailable, and checks the token rose.
	cycle := func(round int) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := lc.Acquire(cctx, &lockdv1.AcquireRequest{Key: "failover/job", Owner: fmt.Sprint("round-", round), RequestId: fmt.Sprint("acq-", round)})
			if err == nil && res.GetAcquired() {
				tok := res.GetLease().GetFencingToken()
				if tok <= last {
					ccancel()
					t.Fatalf("round %d: fencing token %d after %d", round, tok, last)
				}
				last = tok
				_, err = lc.Release(cctx, &lockdv1.ReleaseRequest{Key: "failover/job", LeaseId: res.GetLease().GetLeaseId(), RequestId: fmt.Sprint("rel-", round)})
			}
			ccancel()
			switch {
			case err == nil && res.GetAcquired():
				return
			case err == nil:
				// A grant lost in the failover may still hold the key
				// until its lease runs out; wait for it like a client would.
			case status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.NotFound:
				t.Fatalf("round %d: %v", round, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: lockd did not serve again after the failover: %v", round, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for round := range 5 {
		cycle(round)
	}
	old := st.MasterAddr()
	st.Failover(t)
	if st.MasterAddr() == old {
		t.Fatal("the master did not change")
	}
	for round := 5; round < 10; round++ {
		cycle(round)
	}
}

// TestClusterThroughLockd runs lockd on a 3-master Redis Cluster: keys with
// braces and any Unicode work, a waiter on one key is woken by the release
// (sharded pub/sub), and holders never overlap.
func TestClusterThroughLockd(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	p := startLockd(t, nil, "--redis="+strings.Join(cl.Addrs(), ","))
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, key := range []string{"{", "}", "{user}:1", "a{b}c{d}", "}{", "锁/订单/{42}", "plain/key"} {
		res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: "a"})
		if err != nil || !res.GetAcquired() {
			t.Fatalf("Acquire(%q): %v, %v", key, res, err)
		}
		if r, err := lc.RLock(ctx, &lockdv1.RLockRequest{Key: key, Owner: "b"}); err != nil || r.GetAcquired() {
			t.Fatalf("RLock(%q) while written: %v, %v", key, r, err)
		}
		if _, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
			t.Fatalf("Renew(%q): %v", key, err)
		}
		if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
	}

	overlaps := contend(ctx, t, []lockdv1.LockServiceClient{lc}, "{shared}/job", 12, 8)
	if overlaps != 0 {
		t.Fatalf("%d overlapping holds on Cluster", overlaps)
	}
}
