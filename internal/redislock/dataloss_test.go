package redislock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestRedisLosingItsDataReachesHoldersFirst restarts Redis empty under a
// kept-alive lease with a waiter queued on its key. The lease's next
// scheduled renewal is twenty minutes away, so only lockd noticing the loss
// can end the KeepAlive: it must end with ErrNotHeld before the waiter is
// granted the key, and the waiter's fencing token is still higher.
func TestRedisLosingItsDataReachesHoldersFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const grace = 2 * time.Second
	obs := &dataLossCounter{}
	c := newClient(t, rdb, redislock.Options{DataLossGrace: grace, Observer: obs})
	holderLearnsFirst(t, c, "lost/data", func() {
		if n := obs.dataLoss.Load(); n != 0 {
			t.Fatalf("%d data losses observed before Redis restarted", n)
		}
		srv.Restart(t)
	})
	if obs.dataLoss.Load() == 0 {
		t.Error("the observer was not told of the data loss")
	}
}

// holderLearnsFirst takes key for an hour and keeps it alive (the next
// scheduled renewal twenty minutes away), queues a waiter on it, and calls
// lose, which makes Redis lose the lease: the holder's KeepAlive must end
// with ErrNotHeld before the waiter is granted the key, and the waiter's
// fencing token is still higher.
func holderLearnsFirst(t *testing.T, c *redislock.Client, key string, lose func()) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	held := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	renewed := make(chan struct{}, 1)
	kept := make(chan error, 1)
	go func() {
		err := c.KeepAlive(ctx, key, held.ID, 0, func(redislock.Lease) error {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return nil
		})
		record("holder told")
		kept <- err
	}()
	<-renewed
	waited := make(chan redislock.Result, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "waiter", TTL: minute, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		record("waiter granted")
		waited <- res
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter queue; the order below does not depend on it

	lose()
	var err error
	select {
	case err = <-kept:
	case res := <-waited:
		t.Fatalf("the waiter was granted %+v while the holder's KeepAlive still ran", res)
	case <-ctx.Done():
		t.Fatal("the holder's KeepAlive did not notice Redis losing the lease")
	}
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("KeepAlive after the loss = %v, want ErrNotHeld", err)
	}
	res := <-waited
	if !res.Acquired || res.Lease.FencingToken <= held.FencingToken {
		t.Fatalf("waiter after the loss = %+v; holder's token %d", res, held.FencingToken)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0] != "holder told" {
		t.Fatalf("events %v: the holder must learn first", events)
	}
}

// dataLossCounter is a DataLossObserver that counts data losses.
type dataLossCounter struct {
	lostCounter
	dataLoss atomic.Int64
}

func (o *dataLossCounter) DataLoss() { o.dataLoss.Add(1) }

// keepAlive runs c.KeepAlive on a lease in the background, counting its
// renewals; its error arrives on the returned channel.
func keepAlive(ctx context.Context, c *redislock.Client, key, id string) (renewals func() int64, ended <-chan error) {
	var n atomicInt
	done := make(chan error, 1)
	go func() {
		done <- c.KeepAlive(ctx, key, id, 0, func(redislock.Lease) error {
			n.add()
			return nil
		})
	}()
	return n.load, done
}

// TestClusterMasterLosingItsDataHoldsItsSlotsAlone restarts one master of a
// Cluster empty: the kept-alive lease on it ends at once (its next
// scheduled renewal is twenty minutes away), grants on its slots pause for
// the grace, and the lease and grants on the other masters go on.
func TestClusterMasterLosingItsDataHoldsItsSlotsAlone(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rdb := cl.ClusterClient(t)
	const grace = 8 * time.Second // long enough that "right after" holds on a busy machine
	c := newClient(t, rdb, redislock.Options{DataLossGrace: grace, WatchInterval: 100 * time.Millisecond})
	ctx := ctxT(t, 2*time.Minute)
	// Two keys on one master (one held, one free) and one on another.
	var lostKey, freeKey, otherKey string
	var lostNode *redistest.Server
	for i := 0; otherKey == "" || freeKey == ""; i++ {
		key := "slot-loss/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		node, err := rdb.MasterForKey(ctx, "lockd:{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		switch addr := node.Options().Addr; {
		case lostKey == "":
			lostKey = key
			for _, n := range cl.Nodes() {
				if n.Addr() == addr {
					lostNode = n
				}
			}
		case addr == lostNode.Addr() && freeKey == "":
			freeKey = key
		case addr != lostNode.Addr() && otherKey == "":
			otherKey = key
		}
	}
	lost := mustAcquire(t, c, redislock.Request{Key: lostKey, Mode: redislock.Write, TTL: time.Hour})
	other := mustAcquire(t, c, redislock.Request{Key: otherKey, Mode: redislock.Write, TTL: time.Hour})
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	_, lostEnded := keepAlive(kctx, c, lostKey, lost.ID)
	otherRenewals, otherEnded := keepAlive(kctx, c, otherKey, other.ID)
	waitUntil(t, "the first renewals", func() bool { return otherRenewals() > 0 })

	lostNode.Restart(t)
	select {
	case err := <-lostEnded:
		if !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("KeepAlive of the lease on the restarted master = %v", err)
		}
	case err := <-otherEnded:
		t.Fatalf("KeepAlive on a healthy master ended: %v", err)
	case <-ctx.Done():
		t.Fatal("the lease on the restarted master was not found lost")
	}
	// Grants on the restarted master's slots wait; elsewhere they do not.
	res, err := c.Acquire(ctx, redislock.Request{Key: freeKey, Mode: redislock.Write, TTL: minute})
	if err != nil || res.Acquired || res.RetryAfter <= 0 || res.RetryAfter > grace {
		t.Fatalf("a grant on the restarted master right after = %+v, %v; want held back for the grace", res, err)
	}
	mustAcquire(t, c, redislock.Request{Key: otherKey + "/free", Mode: redislock.Write, TTL: minute})
	select {
	case err := <-otherEnded:
		t.Fatalf("KeepAlive on a healthy master ended: %v", err)
	default:
	}
	// After the grace the slot grants again, with a higher fencing token.
	res, err = c.Acquire(ctx, redislock.Request{Key: freeKey, Mode: redislock.Write, TTL: minute, Wait: 2 * grace})
	if err != nil || !res.Acquired {
		t.Fatalf("a grant on the restarted master after the grace = %+v, %v", res, err)
	}
	// Each slot's hold began when lockd first saw that slot's data gone, so
	// the lost key's slot may resume a moment after the free key's.
	again := mustAcquire(t, c, redislock.Request{Key: lostKey, Mode: redislock.Write, Owner: "next", TTL: minute, Wait: 2 * grace})
	if again.FencingToken <= lost.FencingToken {
		t.Fatalf("token %d after %d", again.FencingToken, lost.FencingToken)
	}
}

// TestFailoverKeepsLeasesThatSurvivedAndHoldsGrants fails a Sentinel
// deployment over: lockd notices the new master, holds new grants back for
// the grace, and checks kept-alive leases at once — one that reached the
// replica goes on.
func TestFailoverKeepsLeasesThatSurvivedAndHoldsGrants(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	rdb := st.FailoverClient(t)
	const grace = 3 * time.Second
	c := newClient(t, rdb, redislock.Options{DataLossGrace: grace, WatchInterval: 100 * time.Millisecond, WaitReplicas: 1})
	ctx := ctxT(t, 2*time.Minute)
	l := mustAcquire(t, c, redislock.Request{Key: "failover/kept", Mode: redislock.Write, TTL: time.Hour})
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	renewals, ended := keepAlive(kctx, c, "failover/kept", l.ID)
	waitUntil(t, "the first renewal", func() bool { return renewals() > 0 })
	// Let the watch learn the master before it fails over.
	time.Sleep(300 * time.Millisecond)

	st.Failover(t)
	// The next scheduled renewal is twenty minutes away: a renewal now
	// means the lease was checked at once.
	waitUntil(t, "the kept-alive lease to be checked", func() bool { return renewals() > 1 })
	select {
	case err := <-ended:
		t.Fatalf("a lease that reached the replica was lost: %v", err)
	default:
	}
	res, err := c.Acquire(ctx, redislock.Request{Key: "failover/new", Mode: redislock.Write, TTL: minute})
	if err != nil || res.Acquired || res.RetryAfter > grace {
		t.Fatalf("a new grant right after the failover = %+v, %v; want held back for the grace", res, err)
	}
	res, err = c.Acquire(ctx, redislock.Request{Key: "failover/new", Mode: redislock.Write, TTL: minute, Wait: 3 * grace})
	if err != nil || !res.Acquired || res.Lease.FencingToken <= l.FencingToken {
		t.Fatalf("a new grant after the grace = %+v, %v", res, err)
	}
}

// TestWaitReplicasGivesBackUnconfirmedGrants freezes the only replica under
// an engine that waits for one: a grant it cannot confirm fails with
// ErrNotReplicated and is given back, so the key is free once the replica
// is back.
func TestWaitReplicasGivesBackUnconfirmedGrants(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	rdb := st.FailoverClient(t)
	c := newClient(t, rdb, redislock.Options{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	ctx := ctxT(t, time.Minute)
	l := mustAcquire(t, c, redislock.Request{Key: "wait/ok", Mode: redislock.Write, TTL: minute})
	if _, err := c.Renew(ctx, "wait/ok", l.ID, 0); err != nil {
		t.Fatal(err)
	}
	var replica *redistest.Server
	for _, n := range st.Nodes() {
		if n.Addr() != st.MasterAddr() {
			replica = n
		}
	}
	replica.Freeze()
	_, err := c.Acquire(ctx, redislock.Request{Key: "wait/unconfirmed", Mode: redislock.Write, Owner: "a", TTL: minute})
	_, renewErr := c.Renew(ctx, "wait/ok", l.ID, 0)
	replica.Thaw()
	if !errors.Is(err, redislock.ErrNotReplicated) || !errors.Is(renewErr, redislock.ErrNotReplicated) {
		t.Fatalf("with the replica frozen: Acquire %v, Renew %v; want ErrNotReplicated", err, renewErr)
	}
	waitUntil(t, "the unconfirmed grant to be given back", func() bool {
		res, err := c.Acquire(ctx, redislock.Request{Key: "wait/unconfirmed", Mode: redislock.Write, Owner: "b", TTL: minute})
		return err == nil && res.Acquired
	})
}

// TestWaitReplicasKeepsAnUnconfirmedGrantForItsRetry: a grant with a
// request id that the replicas did not confirm is kept for the caller's
// retry rather than given back behind it; the retry, once the replica has
// it, is confirmed and handed the same lease, which stays held.
func TestWaitReplicasKeepsAnUnconfirmedGrantForItsRetry(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	rdb := st.FailoverClient(t)
	c := newClient(t, rdb, redislock.Options{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	ctx := ctxT(t, time.Minute)
	mustAcquire(t, c, redislock.Request{Key: "wait/warm-up", Mode: redislock.Write, TTL: minute})
	var replica *redistest.Server
	for _, n := range st.Nodes() {
		if n.Addr() != st.MasterAddr() {
			replica = n
		}
	}
	req := redislock.Request{Key: "wait/retried", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "try-1"}
	replica.Freeze()
	_, err := c.Acquire(ctx, req)
	replica.Thaw()
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("with the replica frozen: Acquire %v; want ErrNotReplicated", err)
	}
	var res redislock.Result
	waitUntil(t, "the retry to be confirmed", func() bool {
		res, err = c.Acquire(ctx, req)
		return err == nil
	})
	if !res.Acquired || res.Lease.HoldCount != 1 {
		t.Fatalf("the retry = %+v, want the first grant, held once", res)
	}
	// Whatever clean-up the first call left has landed once Close returns.
	_ = c.Close()
	other := newClient(t, rdb, redislock.Options{})
	if _, err := other.Renew(ctx, req.Key, res.Lease.ID, 0); err != nil {
		t.Fatalf("the lease the retry was handed: %v", err)
	}
}
