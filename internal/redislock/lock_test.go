package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

const minute = time.Minute

func contractExclusive(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	key := "orders/42"
	a := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "a", TTL: minute})
	if a.HoldCount != 1 || a.Mode != redislock.Write || a.Owner != "a" || len(a.ID) < 22 {
		t.Fatalf("lease = %+v", a)
	}
	res := mustRefuse(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "b", TTL: minute})
	if res.RetryAfter <= 50*time.Second || res.RetryAfter > minute {
		t.Fatalf("RetryAfter = %v, want about a minute", res.RetryAfter)
	}
	mustRefuse(t, c, redislock.Request{Key: key, Mode: redislock.Read, Owner: "b", TTL: minute})
	if n, err := c.Release(ctxT(t, 5*time.Second), key, a.ID, ""); err != nil || n != 0 {
		t.Fatalf("Release = %d, %v", n, err)
	}
	bl := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "b", TTL: minute})
	if bl.FencingToken <= a.FencingToken {
		t.Fatalf("token %d after %d", bl.FencingToken, a.FencingToken)
	}
}

func contractReentrancy(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	for _, mode := range []redislock.Mode{redislock.Write, redislock.Read} {
		key := "reentrant/" + mode.String()
		req := redislock.Request{Key: key, Mode: mode, Owner: "host:1:main", TTL: minute}
		first := mustAcquire(t, c, req)
		second := mustAcquire(t, c, req)
		if second.ID != first.ID || second.HoldCount != 2 || second.FencingToken != first.FencingToken {
			t.Fatalf("%v re-entry = %+v, first %+v", mode, second, first)
		}
		if n, err := c.Release(ctx, key, first.ID, ""); err != nil || n != 1 {
			t.Fatalf("first Release = %d, %v; want 1", n, err)
		}
		// Still held: another writer is refused.
		mustRefuse(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "other", TTL: minute})
		if n, err := c.Release(ctx, key, first.ID, ""); err != nil || n != 0 {
			t.Fatalf("second Release = %d, %v; want 0", n, err)
		}
		if _, err := c.Release(ctx, key, first.ID, ""); !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("third Release err = %v, want ErrNotHeld", err)
		}
		mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "other", TTL: minute})
	}
}

func contractEmptyOwnerIsUnique(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	a := mustAcquire(t, c, redislock.Request{Key: "anon", Mode: redislock.Write, TTL: minute})
	if a.Owner == "" {
		t.Fatal("empty owner was not replaced")
	}
	mustRefuse(t, c, redislock.Request{Key: "anon", Mode: redislock.Write, TTL: minute})
	r1 := mustAcquire(t, c, redislock.Request{Key: "anon-read", Mode: redislock.Read, TTL: minute})
	r2 := mustAcquire(t, c, redislock.Request{Key: "anon-read", Mode: redislock.Read, TTL: minute})
	if r1.ID == r2.ID || r1.Owner == r2.Owner {
		t.Fatalf("two anonymous readers share a lease: %+v %+v", r1, r2)
	}
}

func contractDowngradeAndUpgrade(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	w := mustAcquire(t, c, redislock.Request{Key: "doc", Mode: redislock.Write, Owner: "a", TTL: minute})
	r := mustAcquire(t, c, redislock.Request{Key: "doc", Mode: redislock.Read, Owner: "a", TTL: minute})
	if r.ID == w.ID || r.Mode != redislock.Read || r.FencingToken <= w.FencingToken {
		t.Fatalf("downgrade read lease = %+v, write %+v", r, w)
	}
	mustRefuse(t, c, redislock.Request{Key: "doc", Mode: redislock.Read, Owner: "b", TTL: minute})
	if _, err := c.Release(ctx, "doc", w.ID, ""); err != nil {
		t.Fatal(err)
	}
	// Downgraded: only the read hold is left, other readers get in.
	mustAcquire(t, c, redislock.Request{Key: "doc", Mode: redislock.Read, Owner: "b", TTL: minute})

	// A reader asking for the write lock would deadlock: refused.
	_, err := c.Acquire(ctx, redislock.Request{Key: "doc", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: time.Second})
	if !errors.Is(err, redislock.ErrUpgrade) {
		t.Fatalf("upgrade err = %v, want ErrUpgrade", err)
	}
	mustAcquire(t, c, redislock.Request{Key: "solo", Mode: redislock.Read, Owner: "c", TTL: minute})
	if _, err := c.Acquire(ctx, redislock.Request{Key: "solo", Mode: redislock.Write, Owner: "c", TTL: minute}); !errors.Is(err, redislock.ErrUpgrade) {
		t.Fatalf("sole reader upgrade err = %v, want ErrUpgrade", err)
	}
}

func contractSharedReaders(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	var leases []redislock.Lease
	for i := range 5 {
		leases = append(leases, mustAcquire(t, c, redislock.Request{Key: "shared", Mode: redislock.Read, Owner: fmt.Sprint("r", i), TTL: minute}))
	}
	mustRefuse(t, c, redislock.Request{Key: "shared", Mode: redislock.Write, Owner: "w", TTL: minute})
	for _, l := range leases {
		mustRefuse(t, c, redislock.Request{Key: "shared", Mode: redislock.Write, Owner: "w", TTL: minute})
		if _, err := c.Release(ctx, "shared", l.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, c, redislock.Request{Key: "shared", Mode: redislock.Write, Owner: "w", TTL: minute})
}

func contractWriterPreference(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	r1 := mustAcquire(t, c, redislock.Request{Key: "wp", Mode: redislock.Read, Owner: "r1", TTL: minute})

	got := make(chan redislock.Result, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: "wp", Mode: redislock.Write, Owner: "w", TTL: minute, Wait: 15 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	// Once the writer queues, new readers stay out.
	waitUntil(t, "a new reader is refused while the writer waits", func() bool {
		res, err := c.Acquire(ctx, redislock.Request{Key: "wp", Mode: redislock.Read, Owner: "r2", TTL: minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			_, _ = c.Release(ctx, "wp", res.Lease.ID, "")
		}
		return !res.Acquired
	})
	// The existing reader may re-enter.
	again := mustAcquire(t, c, redislock.Request{Key: "wp", Mode: redislock.Read, Owner: "r1", TTL: minute})
	if again.ID != r1.ID || again.HoldCount != 2 {
		t.Fatalf("re-entry = %+v", again)
	}
	for range 2 {
		if _, err := c.Release(ctx, "wp", r1.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case res := <-got:
		if !res.Acquired {
			t.Fatalf("writer not granted after readers left: %+v", res)
		}
	case <-ctx.Done():
		t.Fatal("writer still waiting")
	}
}

func contractWriterThatGivesUpStopsBlockingReaders(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	mustAcquire(t, c, redislock.Request{Key: "gone", Mode: redislock.Read, Owner: "r1", TTL: minute})

	// A writer whose caller cancels leaves the queue at once.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, redislock.Request{Key: "gone", Mode: redislock.Write, Owner: "w", TTL: minute, Wait: minute})
		done <- err
	}()
	waitUntil(t, "the writer queues", func() bool {
		res, err := c.Acquire(ctx, redislock.Request{Key: "gone", Mode: redislock.Read, Owner: "probe", TTL: minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			_, _ = c.Release(ctx, "gone", res.Lease.ID, "")
		}
		return !res.Acquired
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled writer err = %v", err)
	}
	mustAcquire(t, c, redislock.Request{Key: "gone", Mode: redislock.Read, Owner: "r2", TTL: minute})

	// A writer that vanished without a word (its process died) stops
	// blocking readers when its wait ends.
	other := b.newClient(t, redislock.Options{})
	res, err := other.Acquire(ctx, redislock.Request{Key: "gone", Mode: redislock.Write, Owner: "w2", TTL: minute, Wait: 400 * time.Millisecond})
	if err != nil || res.Acquired {
		t.Fatalf("second writer = %+v, %v", res, err)
	}
	mustAcquire(t, c, redislock.Request{Key: "gone", Mode: redislock.Read, Owner: "r3", TTL: minute})
}

func contractExpiryFreesTheLock(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	a := mustAcquire(t, c, redislock.Request{Key: "short", Mode: redislock.Write, Owner: "a", TTL: 300 * time.Millisecond})

	// The lease's expiry is Redis's clock plus the ttl.
	now, err := b.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := a.ExpireTime.Sub(now); d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("ExpireTime is %v after Redis's clock, want within ttl", d)
	}
	// A waiter is granted the lock when the lease runs out, with no
	// release message: the re-check at the holder's remaining lease.
	res, err := c.Acquire(ctx, redislock.Request{Key: "short", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: 10 * time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("waiter = %+v, %v", res, err)
	}
	if _, err := c.Release(ctx, "short", a.ID, ""); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("stale Release err = %v, want ErrNotHeld", err)
	}
	if _, err := c.Renew(ctx, "short", a.ID, minute); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("stale Renew err = %v, want ErrNotHeld", err)
	}
	// The new holder is untouched.
	l, err := c.Renew(ctx, "short", res.Lease.ID, 0)
	if err != nil || l.HoldCount != 1 || l.Owner != "b" {
		t.Fatalf("new holder after stale calls = %+v, %v", l, err)
	}
}

func contractRenew(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	a := mustAcquire(t, c, redislock.Request{Key: "renew", Mode: redislock.Write, Owner: "a", TTL: 500 * time.Millisecond})
	l, err := c.Renew(ctx, "renew", a.ID, minute)
	if err != nil || l.TTL != minute || !l.ExpireTime.After(a.ExpireTime.Add(50*time.Second)) || l.FencingToken != a.FencingToken {
		t.Fatalf("Renew = %+v, %v", l, err)
	}
	// Zero keeps the lease's own (now renewed) ttl.
	l2, err := c.Renew(ctx, "renew", a.ID, 0)
	if err != nil || l2.TTL != minute {
		t.Fatalf("Renew(0) = %+v, %v", l2, err)
	}
	if _, err := c.Renew(ctx, "renew", "no-such-lease", 0); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("unknown lease err = %v", err)
	}
	if _, err := c.Renew(ctx, "other-key", a.ID, 0); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("lease of another key err = %v", err)
	}
}

func contractKeepAlive(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 40*time.Second)
	// Two seconds: renewals every ttl/3 survive a busy machine's stalls.
	const ttl = 2 * time.Second
	a := mustAcquire(t, c, redislock.Request{Key: "ka", Mode: redislock.Write, Owner: "a", TTL: ttl})

	kctx, stop := context.WithCancel(ctx)
	var renewals atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.KeepAlive(kctx, "ka", a.ID, 0, func(l redislock.Lease) error {
			renewals.Add(1)
			return nil
		})
	}()
	// Held across many ttls: nobody else gets it.
	held := time.Now()
	for time.Since(held) < 4*ttl {
		mustRefuse(t, c, redislock.Request{Key: "ka", Mode: redislock.Write, Owner: "b", TTL: ttl})
		time.Sleep(ttl / 4)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("KeepAlive after cancel = %v", err)
	}
	if n := renewals.Load(); n < 6 {
		t.Fatalf("%d renewals over 4 ttls, want about 12", n)
	}
	// Renewal stopped: the lease runs out and another owner gets in.
	res, err := c.Acquire(ctx, redislock.Request{Key: "ka", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: 5 * time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("after KeepAlive stopped: %+v, %v", res, err)
	}

	// KeepAlive ends with ErrNotHeld when the lease is lost.
	lost := make(chan error, 1)
	go func() {
		lost <- c.KeepAlive(ctx, "ka", res.Lease.ID, 200*time.Millisecond, func(redislock.Lease) error { return nil })
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Release(ctx, "ka", res.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("KeepAlive on a lost lease = %v, want ErrNotHeld", err)
		}
	case <-ctx.Done():
		t.Fatal("KeepAlive did not notice the lost lease")
	}
}

func TestFencingTokensSurviveRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	var last uint64
	for i := range 20 {
		l := mustAcquire(t, c, redislock.Request{Key: "fence", Mode: redislock.Mode(1 + i%2), TTL: minute})
		if l.FencingToken <= last {
			t.Fatalf("round %d: token %d after %d", i, l.FencingToken, last)
		}
		last = l.FencingToken
		if _, err := c.Release(ctx, "fence", l.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart(t)
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after restart DBSIZE = %d, %v; want an empty Redis", n, err)
	}
	l := mustAcquire(t, c, redislock.Request{Key: "fence", Mode: redislock.Write, TTL: minute})
	if l.FencingToken <= last {
		t.Fatalf("after restart token %d, before %d", l.FencingToken, last)
	}
}

func contractKeys(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	keys := []string{"{", "}", "{}", "}{", "a{b}c", "%7B", "%", "锁/订单/1", "🔒", "with space", strings.Repeat("k", redislock.MaxKeyBytes)}
	var leases []redislock.Lease
	for _, k := range keys {
		leases = append(leases, mustAcquire(t, c, redislock.Request{Key: k, Mode: redislock.Write, Owner: "a", TTL: minute}))
	}
	// Distinct keys are distinct locks: each is held by "a" alone.
	for _, k := range keys {
		mustRefuse(t, c, redislock.Request{Key: k, Mode: redislock.Write, Owner: "b", TTL: minute})
	}
	for i, k := range keys {
		if n, err := c.Release(ctxT(t, 5*time.Second), k, leases[i].ID, ""); err != nil || n != 0 {
			t.Fatalf("Release(%q) = %d, %v", k, n, err)
		}
	}
}

func contractInvalidRequests(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 5*time.Second)
	cases := []struct {
		name string
		req  redislock.Request
		want error
	}{
		{"an empty key is refused", redislock.Request{Mode: redislock.Write, TTL: minute}, redislock.ErrInvalidKey},
		{"an oversized key is refused", redislock.Request{Key: strings.Repeat("k", 513), Mode: redislock.Write, TTL: minute}, redislock.ErrInvalidKey},
		{"invalid UTF-8 is refused", redislock.Request{Key: "a\xffb", Mode: redislock.Write, TTL: minute}, redislock.ErrInvalidKey},
		{"a control character is refused", redislock.Request{Key: "a\nb", Mode: redislock.Write, TTL: minute}, redislock.ErrInvalidKey},
		{"a zero ttl is refused", redislock.Request{Key: "k", Mode: redislock.Write}, redislock.ErrInvalidTTL},
		{"a negative ttl is refused", redislock.Request{Key: "k", Mode: redislock.Write, TTL: -time.Second}, redislock.ErrInvalidTTL},
		{"an unknown mode is refused", redislock.Request{Key: "k", Mode: 7, TTL: minute}, redislock.ErrInvalidMode},
	}
	for _, tc := range cases {
		if _, err := c.Acquire(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := c.Release(ctx, "k", "", ""); !errors.Is(err, redislock.ErrNotHeld) {
		t.Errorf("empty lease id: %v", err)
	}
	if n, err := b.countKeys(ctx); err != nil || n != 0 {
		t.Errorf("refused requests left %d keys (%v)", n, err)
	}
}

func contractIdempotentRequests(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 5*time.Second)
	req := redislock.Request{Key: "idem", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "req-1"}
	first := mustAcquire(t, c, req)
	again := mustAcquire(t, c, req)
	if again.ID != first.ID || again.HoldCount != 1 {
		t.Fatalf("retried acquire = %+v, first %+v", again, first)
	}
	req.RequestID = "req-2"
	if l := mustAcquire(t, c, req); l.HoldCount != 2 {
		t.Fatalf("new request id re-entry = %+v", l)
	}
	for range 3 {
		if n, err := c.Release(ctx, "idem", first.ID, "rel-1"); err != nil || n != 1 {
			t.Fatalf("retried release = %d, %v; want 1 each time", n, err)
		}
	}
	if n, err := c.Release(ctx, "idem", first.ID, "rel-2"); err != nil || n != 0 {
		t.Fatalf("second release = %d, %v", n, err)
	}
}

func contractNothingLeftBehind(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	for i := range 50 {
		key := fmt.Sprint("job/", i)
		// Request ids are remembered for the lease's ttl, so keep it short.
		l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Mode(1 + i%2), TTL: 2 * time.Second, RequestID: "r"})
		if i%3 == 0 {
			mustRefuse(t, c, redislock.Request{Key: key, Mode: redislock.Write, TTL: minute, Wait: 20 * time.Millisecond})
		}
		if _, err := c.Release(ctx, key, l.ID, "rel"); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, c, redislock.Request{Key: "expiring", Mode: redislock.Write, TTL: 50 * time.Millisecond})
	keys, err := b.keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl, err := b.rdb.PTTL(ctx, k).Result(); err != nil || ttl == -1 { // -2: already gone
			t.Errorf("key %q has no expiry (PTTL %v, %v)", k, ttl, err)
		}
	}
	waitUntil(t, "every key of released locks is gone", func() bool {
		n, err := b.countKeys(ctx)
		return err == nil && n == 0
	})
}

// contractHandoffIsWokenByRelease shows waiters are woken by the release message:
// with re-checks pushed out to a minute, only pub/sub can wake them in time.
func contractHandoffIsWokenByRelease(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{MaxRecheck: time.Hour})
	ctx := ctxT(t, 30*time.Second)
	for _, mode := range []redislock.Mode{redislock.Write, redislock.Read} {
		key := "handoff/" + mode.String()
		h := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
		const waiters = 4
		var wg sync.WaitGroup
		results := make(chan redislock.Result, waiters)
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: mode, Owner: fmt.Sprint("w", i), TTL: time.Hour, Wait: time.Hour})
				if err != nil {
					t.Error(err)
				}
				results <- res
				if res.Acquired && mode == redislock.Write {
					_, _ = c.Release(ctx, key, res.Lease.ID, "")
				}
			}()
		}
		time.Sleep(200 * time.Millisecond) // let them queue; correctness does not depend on it
		if _, err := c.Release(ctx, key, h.ID, ""); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(results)
		for res := range results {
			if !res.Acquired {
				t.Fatalf("%v waiter not granted: %+v", mode, res)
			}
		}
	}
}

func contractWaitEnds(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	mustAcquire(t, c, redislock.Request{Key: "busy", Mode: redislock.Write, Owner: "a", TTL: minute})
	start := time.Now()
	res := mustRefuse(t, c, redislock.Request{Key: "busy", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: 200 * time.Millisecond})
	if res.RetryAfter <= 0 || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("wait ended after %v with %+v", time.Since(start), res)
	}
	// The caller's deadline ends the wait too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := c.Acquire(ctx, redislock.Request{Key: "busy", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: minute})
	if err != nil || res.Acquired {
		t.Fatalf("deadline-bounded wait = %+v, %v", res, err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// contractRequestIDsStayWithTheirCall reuses request ids across calls,
// callers and leases: a request id never hands one caller another's lease,
// and never stands in for a different release.
func contractRequestIDsStayWithTheirCall(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	alice := mustAcquire(t, c, redislock.Request{Key: "rid", Mode: redislock.Write, Owner: "alice", TTL: minute, RequestID: "1"})
	// Another owner, or another mode, with the same request id is a new
	// request: refused while alice holds the key.
	mustRefuse(t, c, redislock.Request{Key: "rid", Mode: redislock.Read, Owner: "bob", TTL: minute, RequestID: "1"})
	mustRefuse(t, c, redislock.Request{Key: "rid", Mode: redislock.Write, Owner: "bob", TTL: minute, RequestID: "1"})
	// A Release may reuse an Acquire's request id.
	if n, err := c.Release(ctx, "rid", alice.ID, "1"); err != nil || n != 0 {
		t.Fatalf("Release with the Acquire's request id = %d, %v", n, err)
	}
	// A request id used to release one lease does not stand in for
	// releasing another.
	x := mustAcquire(t, c, redislock.Request{Key: "rid-x", Mode: redislock.Write, TTL: minute})
	y := mustAcquire(t, c, redislock.Request{Key: "rid-x2", Mode: redislock.Write, TTL: minute})
	if _, err := c.Release(ctx, "rid-x", x.ID, "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "rid-x2", y.ID, "same"); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, c, redislock.Request{Key: "rid-x2", Mode: redislock.Write, TTL: minute})
	// Lease ids that look like the lock's bookkeeping are simply not held.
	for _, id := range []string{"fence", "wl", "o:w:alice", "l:x", ""} {
		if _, err := c.Release(ctx, "rid-x2", id, ""); !errors.Is(err, redislock.ErrNotHeld) {
			t.Errorf("Release(%q) = %v, want ErrNotHeld", id, err)
		}
		if _, err := c.Renew(ctx, "rid-x2", id, 0); !errors.Is(err, redislock.ErrNotHeld) {
			t.Errorf("Renew(%q) = %v, want ErrNotHeld", id, err)
		}
	}
}
