package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// lostCounter is an Observer that counts lost leases.
type lostCounter struct{ lost atomic.Int64 }

func (*lostCounter) Granted(redislock.Mode, time.Duration)  {}
func (*lostCounter) Waited(redislock.Mode, time.Duration)   {}
func (*lostCounter) Released(redislock.Mode, time.Duration) {}
func (o *lostCounter) Lost()                                { o.lost.Add(1) }

// TestReentryNeverShortensALease re-enters a kept-alive lease with a much
// shorter ttl: the lease keeps its expiry and its own ttl, so KeepAlive
// keeps it for its owner and nobody else is granted it.
func TestReentryNeverShortensALease(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Client(t), redislock.Options{})
	ctx := ctxT(t, 30*time.Second)
	req := redislock.Request{Key: "nested", Mode: redislock.Write, Owner: "job", TTL: 6 * time.Second}
	outer := mustAcquire(t, c, req)

	kctx, stop := context.WithCancel(ctx)
	defer stop()
	var last atomic.Pointer[redislock.Lease]
	kept := make(chan error, 1)
	go func() {
		kept <- c.KeepAlive(kctx, "nested", outer.ID, 0, func(l redislock.Lease) error {
			last.Store(&l)
			return nil
		})
	}()
	waitUntil(t, "the first renewal", func() bool { return last.Load() != nil })
	before := *last.Load()

	req.TTL = 200 * time.Millisecond
	inner := mustAcquire(t, c, req)
	if inner.ID != outer.ID || inner.HoldCount != 2 {
		t.Fatalf("re-entry = %+v", inner)
	}
	if inner.ExpireTime.Before(before.ExpireTime) {
		t.Fatalf("re-entry with a 200ms ttl moved the expiry back from %v to %v", before.ExpireTime, inner.ExpireTime)
	}
	if inner.TTL != 6*time.Second {
		t.Fatalf("re-entry with a shorter ttl changed the lease's ttl to %v", inner.TTL)
	}
	// Well past the short ttl, the lease is still its owner's.
	time.Sleep(time.Second)
	mustRefuse(t, c, redislock.Request{Key: "nested", Mode: redislock.Write, Owner: "other", TTL: minute})
	select {
	case err := <-kept:
		t.Fatalf("KeepAlive ended: %v", err)
	default:
	}
	if l := last.Load(); l.TTL != 6*time.Second {
		t.Fatalf("KeepAlive renews to %v, want the lease's own 6s", l.TTL)
	}
}

// TestRetryReplaysTheFirstResult retries an Acquire by its request id after
// the lease was re-entered: the retry gets the first call's result
// unchanged, not the lease's current hold count.
func TestRetryReplaysTheFirstResult(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Client(t), redislock.Options{})
	req := redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "first"}
	first := mustAcquire(t, c, req)
	second := mustAcquire(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "second"})
	if second.HoldCount != 2 {
		t.Fatalf("re-entry = %+v", second)
	}
	again := mustAcquire(t, c, req)
	if again.ID != first.ID || again.HoldCount != first.HoldCount || again.FencingToken != first.FencingToken || again.Owner != first.Owner {
		t.Fatalf("replay = %+v, want the first result %+v", again, first)
	}
}

// TestRequestIDsDoNotCrossOwners replays request ids with a different
// owner, or none: a named owner's lease is never handed to anyone else, and
// an owner-less call's lease only to an owner-less retry.
func TestRequestIDsDoNotCrossOwners(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Client(t), redislock.Options{})
	alice := mustAcquire(t, c, redislock.Request{Key: "named", Mode: redislock.Write, Owner: "alice", TTL: minute, RequestID: "r"})
	// An owner-less call with alice's request id is somebody else.
	res := mustRefuse(t, c, redislock.Request{Key: "named", Mode: redislock.Write, TTL: minute, RequestID: "r"})
	if res.Lease.ID == alice.ID {
		t.Fatal("an owner-less retry got alice's lease")
	}
	// An owner-less original replays to an owner-less retry only.
	anon := mustAcquire(t, c, redislock.Request{Key: "anon", Mode: redislock.Read, TTL: minute, RequestID: "q"})
	if again := mustAcquire(t, c, redislock.Request{Key: "anon", Mode: redislock.Read, TTL: minute, RequestID: "q"}); again.ID != anon.ID {
		t.Fatalf("owner-less retry = %+v, want %+v", again, anon)
	}
	bob := mustAcquire(t, c, redislock.Request{Key: "anon", Mode: redislock.Read, Owner: "bob", TTL: minute, RequestID: "q"})
	if bob.ID == anon.ID || bob.Owner != "bob" {
		t.Fatalf("bob with an owner-less call's request id got %+v", bob)
	}
}

// TestMadeUpLeaseIsNotCountedLost keeps alive a lease id nobody was ever
// granted: KeepAlive ends with ErrNotHeld, but only a lease that was held
// and then lost counts as lost.
func TestMadeUpLeaseIsNotCountedLost(t *testing.T) {
	t.Parallel()
	obs := &lostCounter{}
	c := newClient(t, redistest.Start(t).Client(t), redislock.Options{Observer: obs})
	ctx := ctxT(t, 20*time.Second)
	err := c.KeepAlive(ctx, "made-up", "no-such-lease", 0, func(redislock.Lease) error { return nil })
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("KeepAlive of a made-up lease = %v", err)
	}
	if n := obs.lost.Load(); n != 0 {
		t.Fatalf("a made-up lease counted %d lost", n)
	}
	l := mustAcquire(t, c, redislock.Request{Key: "real", Mode: redislock.Write, TTL: minute})
	done := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	go func() {
		done <- c.KeepAlive(ctx, "real", l.ID, 300*time.Millisecond, func(redislock.Lease) error {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	<-renewed
	if _, err := c.Release(ctx, "real", l.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("KeepAlive of a released lease = %v", err)
	}
	if n := obs.lost.Load(); n != 1 {
		t.Fatalf("a held lease that was lost counted %d, want 1", n)
	}
}

// TestLostRepliesLeaveNoHoldBehind freezes Redis around Acquire calls whose
// deadline ends while Redis is frozen: the scripts run when Redis thaws,
// and lockd undoes exactly what they did — the extra hold of a re-entry,
// and a fresh lease nobody heard of — however long the freeze.
func TestLostRepliesLeaveNoHoldBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.Client(t), redislock.Options{})
	ctx := ctxT(t, 2*time.Minute)
	// lostReply runs req with a 200ms deadline while Redis is frozen for
	// longer than any single clean-up try.
	lostReply := func(req redislock.Request) {
		t.Helper()
		srv.Freeze()
		actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		res, err := c.Acquire(actx, req)
		cancel()
		time.Sleep(1500 * time.Millisecond)
		srv.Thaw()
		if err == nil {
			t.Fatalf("Acquire(%s) with Redis frozen = %+v", req.Key, res)
		}
	}
	free := func(key string) {
		t.Helper()
		waitUntil(t, key+" is free again", func() bool {
			res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "probe", TTL: minute})
			if err != nil {
				return false // Redis may still be catching up
			}
			if res.Acquired {
				_, _ = c.Release(ctx, key, res.Lease.ID, "")
			}
			return res.Acquired
		})
	}

	held := mustAcquire(t, c, redislock.Request{Key: "lost/reentry", Mode: redislock.Write, Owner: "a", TTL: minute})
	lostReply(redislock.Request{Key: "lost/reentry", Mode: redislock.Write, Owner: "a", TTL: minute})
	// The owner's one Release ends its lease: the lost re-entry's hold was
	// given back (now or soon).
	if _, err := c.Release(ctx, "lost/reentry", held.ID, ""); err != nil {
		t.Fatal(err)
	}
	free("lost/reentry")

	lostReply(redislock.Request{Key: "lost/fresh", Mode: redislock.Write, Owner: "b", TTL: minute})
	free("lost/fresh")

	// A semaphore's only permit, granted to nobody who heard of it.
	lostReply(permit("lost/permit", 1, "c", minute))
	waitUntil(t, "the lost permit is given back", func() bool {
		res, err := c.Acquire(ctx, permit("lost/permit", 1, "probe", minute))
		if err != nil {
			return false
		}
		if res.Acquired {
			_, _ = c.Release(ctx, "lost/permit", res.Lease.ID, "")
		}
		return res.Acquired
	})
}

// TestEvictionNeverLeavesTwoWriters runs the lock engine on a Redis that
// evicts (volatile-lru, little memory) and takes thousands of write locks:
// a lock may be evicted whole — its holder then finds the lease gone — but
// never in part, so a key is never granted to a second writer while the
// first holder's lease still renews.
func TestEvictionNeverLeavesTwoWriters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "volatile-lru", "--maxmemory", "3mb"))
	c := newClient(t, srv.Client(t), redislock.Options{})
	ctx := ctxT(t, 2*time.Minute)
	const locks = 6000
	leases := make([]string, locks)
	for i := range leases {
		res, err := c.Acquire(ctx, redislock.Request{Key: fmt.Sprint("evict/", i), Mode: redislock.Write, Owner: "first", TTL: 10 * minute})
		if err != nil || !res.Acquired {
			t.Fatalf("lock %d: %+v, %v", i, res, err)
		}
		leases[i] = res.Lease.ID
	}
	twice, evicted := 0, 0
	for i, id := range leases {
		key := fmt.Sprint("evict/", i)
		res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "second", TTL: 10 * minute})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Acquired {
			continue
		}
		evicted++
		if _, err := c.Renew(ctx, key, id, 0); err == nil {
			twice++
		} else if !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatal(err)
		}
	}
	t.Logf("%d of %d locks evicted", evicted, locks)
	if evicted == 0 {
		t.Fatal("no lock was evicted: the test needs less memory to show anything")
	}
	if twice > 0 {
		t.Fatalf("%d keys granted to a second writer while the first holder's lease still renewed", twice)
	}
}

// TestFrozenMasterCostsOnlyItsOwnLeases keeps leases alive on every master
// of a 3-master Cluster through one engine, whose renewals share pipelines,
// and freezes one master for several ttls: the leases on the other masters
// keep renewing and stay their holders', whatever the frozen one does.
func TestFrozenMasterCostsOnlyItsOwnLeases(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rdb := cl.ClusterClient(t)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 2*time.Minute)
	const ttl = time.Second

	// Two keys on each master.
	byNode := map[string][]string{}
	for i := 0; len(byNode) < 3 || minLen(byNode) < 2; i++ {
		key := fmt.Sprint("spread/", i)
		node, err := rdb.MasterForKey(ctx, "lockd:{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if len(byNode[addr]) < 2 {
			byNode[addr] = append(byNode[addr], key)
		}
	}
	var frozen *redistest.Server
	for _, n := range cl.Nodes() {
		if _, ok := byNode[n.Addr()]; ok {
			frozen = n
			break
		}
	}
	type kept struct {
		key      string
		renewals atomic.Int64
		done     chan error
	}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	var all []*kept
	for _, keys := range byNode {
		for _, key := range keys {
			l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: ttl})
			k := &kept{key: key, done: make(chan error, 1)}
			all = append(all, k)
			go func() {
				k.done <- c.KeepAlive(kctx, key, l.ID, 0, func(redislock.Lease) error {
					k.renewals.Add(1)
					return nil
				})
			}()
		}
	}
	waitUntil(t, "every lease renewed", func() bool {
		for _, k := range all {
			if k.renewals.Load() < 2 {
				return false
			}
		}
		return true
	})

	frozen.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			frozen.Thaw()
		}
	}()
	healthy := func(k *kept) bool {
		return !contains(byNode[frozen.Addr()], k.key)
	}
	before := map[*kept]int64{}
	for _, k := range all {
		before[k] = k.renewals.Load()
	}
	// Four ttls with the master frozen.
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		for _, k := range all {
			if !healthy(k) {
				continue
			}
			select {
			case err := <-k.done:
				t.Fatalf("lease on a healthy master (%s) ended while another master was frozen: %v", k.key, err)
			default:
			}
			res, err := c.Acquire(ctx, redislock.Request{Key: k.key, Mode: redislock.Write, Owner: "intruder", TTL: minute})
			if err != nil {
				t.Fatal(err)
			}
			if res.Acquired {
				t.Fatalf("lease on a healthy master (%s) was granted to another owner while a different master was frozen", k.key)
			}
		}
	}
	frozen.Thaw()
	thawed = true
	for _, k := range all {
		if healthy(k) && k.renewals.Load()-before[k] < 4 {
			t.Errorf("lease %s on a healthy master renewed %d times over 4 ttls", k.key, k.renewals.Load()-before[k])
		}
	}
}

func minLen(m map[string][]string) int {
	n := -1
	for _, v := range m {
		if n < 0 || len(v) < n {
			n = len(v)
		}
	}
	return n
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// atomicInt is a counter for callbacks.
type atomicInt struct{ n atomic.Int64 }

func (a *atomicInt) add()        { a.n.Add(1) }
func (a *atomicInt) load() int64 { return a.n.Load() }
