package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

func permit(key string, limit int, owner string, ttl time.Duration) redislock.Request {
	return redislock.Request{Key: key, Mode: redislock.Permit, Limit: limit, Owner: owner, TTL: ttl}
}

// contractSemaphore walks a semaphore of 2 through its rules: permits of
// their own with rising tokens, re-entry, a full semaphore refusing with
// retry_after, a conflicting limit, a key that is a lock or a semaphore but
// not both, permits released, renewed and kept alive by lease id, and
// nothing left behind.
func contractSemaphore(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 30*time.Second)
	res, err := c.Acquire(ctx, permit("upstream", 2, "a", minute))
	if err != nil || !res.Acquired || res.Available != 1 {
		t.Fatalf("first permit = %+v, %v", res, err)
	}
	a := res.Lease
	if a.Mode != redislock.Permit || a.HoldCount != 1 || a.Owner != "a" || len(a.ID) < 22 {
		t.Fatalf("permit = %+v", a)
	}
	res, err = c.Acquire(ctx, permit("upstream", 2, "b", minute))
	if err != nil || !res.Acquired || res.Available != 0 || res.Lease.ID == a.ID || res.Lease.FencingToken <= a.FencingToken {
		t.Fatalf("second permit = %+v, %v (first %+v)", res, err, a)
	}
	bp := res.Lease
	full := mustRefuse(t, c, permit("upstream", 2, "c", minute))
	if full.Available != 0 || full.RetryAfter < 50*time.Second || full.RetryAfter > minute {
		t.Fatalf("full semaphore answered %+v", full)
	}
	// The same owner re-enters its permit: no second one.
	again := mustAcquire(t, c, permit("upstream", 2, "a", minute))
	if again.ID != a.ID || again.HoldCount != 2 || again.FencingToken != a.FencingToken {
		t.Fatalf("re-entry = %+v, want %+v with 2 holds", again, a)
	}
	if _, err := c.Acquire(ctx, permit("upstream", 3, "d", minute)); !errors.Is(err, redislock.ErrLimitMismatch) {
		t.Fatalf("another limit: %v, want ErrLimitMismatch", err)
	}
	for _, mode := range []redislock.Mode{redislock.Read, redislock.Write} {
		if _, err := c.Acquire(ctx, redislock.Request{Key: "upstream", Mode: mode, Owner: "a", TTL: minute}); !errors.Is(err, redislock.ErrKeyInUse) {
			t.Fatalf("%v lock of a semaphore: %v, want ErrKeyInUse", mode, err)
		}
	}
	if _, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "upstream", TTL: minute}); !errors.Is(err, redislock.ErrKeyInUse) {
		t.Fatalf("Campaign on a semaphore: %v, want ErrKeyInUse", err)
	}

	// Release, Renew and KeepAlive work on permits by lease id.
	if l, err := c.Renew(ctx, "upstream", bp.ID, 2*minute); err != nil || l.Mode != redislock.Permit || l.TTL != 2*minute {
		t.Fatalf("Renew of a permit = %+v, %v", l, err)
	}
	kctx, stopKeep := context.WithCancel(ctx)
	kept := make(chan error, 1)
	var renewals atomic.Int64
	go func() {
		kept <- c.KeepAlive(kctx, "upstream", bp.ID, 0, func(redislock.Lease) error { renewals.Add(1); return nil })
	}()
	waitUntil(t, "a KeepAlive renewal of the permit", func() bool { return renewals.Load() > 0 })
	stopKeep()
	<-kept
	if n, err := c.Release(ctx, "upstream", a.ID, ""); err != nil || n != 1 {
		t.Fatalf("Release of a re-entered permit = %d, %v", n, err)
	}
	mustRefuse(t, c, permit("upstream", 2, "c", minute))
	if n, err := c.Release(ctx, "upstream", a.ID, ""); err != nil || n != 0 {
		t.Fatalf("last Release of a permit = %d, %v", n, err)
	}
	cp := mustAcquire(t, c, permit("upstream", 2, "c", minute))
	if cp.FencingToken <= bp.FencingToken {
		t.Fatalf("token %d after %d", cp.FencingToken, bp.FencingToken)
	}
	for _, id := range []string{bp.ID, cp.ID} {
		if _, err := c.Release(ctx, "upstream", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Release(ctx, "upstream", cp.ID, ""); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Release of a released permit: %v, want ErrNotHeld", err)
	}

	// Once no permit is held, the key takes a new limit, or a lock.
	five, err := c.Acquire(ctx, permit("upstream", 5, "e", minute))
	if err != nil || !five.Acquired || five.Available != 4 {
		t.Fatalf("a new limit once free = %+v, %v", five, err)
	}
	if _, err := c.Release(ctx, "upstream", five.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	w := mustAcquire(t, c, redislock.Request{Key: "upstream", Mode: redislock.Write, Owner: "w", TTL: minute})
	if w.FencingToken <= five.Lease.FencingToken {
		t.Fatalf("lock token %d after permit token %d", w.FencingToken, five.Lease.FencingToken)
	}
	if _, err := c.Acquire(ctx, permit("upstream", 2, "a", minute)); !errors.Is(err, redislock.ErrKeyInUse) {
		t.Fatalf("permit of a held lock: %v, want ErrKeyInUse", err)
	}
	if _, err := c.Release(ctx, "upstream", w.ID, ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every key of the semaphore is gone", func() bool {
		n, err := b.countKeys(ctx)
		return err == nil && n == 0
	})
}

// contractSemaphoreEdges: invalid limits, request ids replaying the first
// permit, permits of a holder that vanished coming back when their lease
// runs out, and waiters woken by a release (re-checks pushed out to an
// hour, so only pub/sub can wake them in time).
func contractSemaphoreEdges(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{MaxRecheck: time.Hour})
	ctx := ctxT(t, 30*time.Second)
	for _, limit := range []int{0, -1} {
		if _, err := c.Acquire(ctx, permit("bad", limit, "a", minute)); !errors.Is(err, redislock.ErrInvalidLimit) {
			t.Errorf("limit %d: %v, want ErrInvalidLimit", limit, err)
		}
	}

	req := permit("retried", 1, "a", minute)
	req.RequestID = "r1"
	first := mustAcquire(t, c, req)
	replayed := mustAcquire(t, c, req)
	if replayed.ID != first.ID || replayed.FencingToken != first.FencingToken || replayed.HoldCount != 1 ||
		!replayed.ExpireTime.Equal(first.ExpireTime) || replayed.Mode != redislock.Permit {
		t.Fatalf("retried request = %+v, want the first result %+v", replayed, first)
	}

	// A holder that vanishes without releasing: its permit comes back
	// when its lease runs out.
	mustAcquire(t, c, permit("crash", 1, "gone", 200*time.Millisecond))
	next := permit("crash", 1, "next", minute)
	next.Wait = 20 * time.Second
	res, err := c.Acquire(ctx, next)
	if err != nil || !res.Acquired {
		t.Fatalf("permit after the holder's lease ran out = %+v, %v", res, err)
	}

	// Waiters are woken by a release: with leases of an hour and re-checks
	// an hour apart, only the release's message wakes them within their
	// wait.
	held := mustAcquire(t, c, permit("wake", 2, "h1", time.Hour))
	held2 := mustAcquire(t, c, permit("wake", 2, "h2", time.Hour))
	const waiters = 3
	var waiting atomic.Int64
	wctx, stopWaiters := context.WithCancel(ctx)
	defer stopWaiters()
	got := make(chan redislock.Result, waiters)
	for i := range waiters {
		go func() {
			r := permit("wake", 2, fmt.Sprint("w", i), time.Hour)
			r.Wait = 20 * time.Second
			r.BeforeWait = func() (func(), error) { waiting.Add(1); return func() {}, nil }
			res, _ := c.Acquire(wctx, r)
			got <- res
		}()
	}
	waitUntil(t, "three waiters", func() bool { return waiting.Load() == waiters })
	for _, l := range []redislock.Lease{held, held2} {
		if _, err := c.Release(ctx, "wake", l.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	granted := 0
	for range 2 {
		if r := <-got; r.Acquired {
			granted++
		}
	}
	stopWaiters()
	<-got
	if granted != 2 {
		t.Fatalf("%d waiters granted after two releases, want 2", granted)
	}
}

// contractAtMostLimitPermits has many goroutines on two engines sharing one
// Redis take permits of one semaphore over and over, counting the holders
// at once and checking every permit is granted.
func contractAtMostLimitPermits(t *testing.T, b backend) {
	engines := []*redislock.Client{b.newClient(t, redislock.Options{}), b.newClient(t, redislock.Options{})}
	const (
		workers = 24
		rounds  = 8
		limit   = 3
	)
	var (
		mu      sync.Mutex
		holding int
		most    int
		over    int
		grants  atomic.Int64
	)
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := engines[w%len(engines)]
			for range rounds {
				r := permit("capped", limit, fmt.Sprint("worker-", w), 30*time.Second)
				r.Wait = time.Minute
				res, err := c.Acquire(ctx, r)
				if err != nil || !res.Acquired {
					t.Errorf("worker %d: %+v, %v", w, res, err)
					return
				}
				grants.Add(1)
				mu.Lock()
				holding++
				most = max(most, holding)
				if holding > limit {
					over++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holding--
				mu.Unlock()
				if _, err := c.Release(ctx, "capped", res.Lease.ID, ""); err != nil {
					t.Errorf("worker %d release: %v", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if over != 0 || most > limit {
		t.Fatalf("%d grants went over the limit of %d (at most %d at once)", over, limit, most)
	}
	if grants.Load() != workers*rounds {
		t.Fatalf("%d grants, want %d", grants.Load(), workers*rounds)
	}
	if most < 2 {
		t.Logf("at most %d permits were held at once: the contention was thin", most)
	}
}
