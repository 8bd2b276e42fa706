package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

// contractDescribe describes a lock with a writer and a waiting writer,
// readers, an election and a semaphore, and a key nobody holds.
func contractDescribe(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 30*time.Second)

	none, err := c.Describe(ctx, "nobody/holds")
	if err != nil || none.Kind != redislock.KindNone || len(none.Holders) != 0 || none.Held != 0 {
		t.Fatalf("Describe of a free key = %+v, %v", none, err)
	}

	w := mustAcquire(t, c, redislock.Request{Key: "orders/42", Mode: redislock.Write, Owner: "worker-1", TTL: minute})
	mustAcquire(t, c, redislock.Request{Key: "orders/42", Mode: redislock.Write, Owner: "worker-1", TTL: minute})
	wctx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, redislock.Request{Key: "orders/42", Mode: redislock.Write, Owner: "worker-2", TTL: minute, Wait: time.Minute})
		waited <- err
	}()
	var info redislock.LockInfo
	waitUntil(t, "the waiting writer shows", func() bool {
		info, err = c.Describe(ctx, "orders/42")
		return err == nil && info.WaitingWriters == 1
	})
	stopWaiting()
	<-waited
	if info.Kind != redislock.KindLock || info.Held != 1 || len(info.Holders) != 1 || info.LastFencingToken != w.FencingToken {
		t.Fatalf("Describe of a held lock = %+v", info)
	}
	h := info.Holders[0]
	if h.Owner != "worker-1" || h.Mode != redislock.Write || h.HoldCount != 2 || h.FencingToken != w.FencingToken ||
		h.TTL != minute || h.Left <= 50*time.Second || h.Left > minute || !h.ExpireTime.After(time.Now().Add(50*time.Second)) {
		t.Fatalf("holder = %+v, lease %+v", h, w)
	}

	r1 := mustAcquire(t, c, redislock.Request{Key: "reports", Mode: redislock.Read, Owner: "r1", TTL: minute})
	r2 := mustAcquire(t, c, redislock.Request{Key: "reports", Mode: redislock.Read, Owner: "r2", TTL: minute})
	info, err = c.Describe(ctx, "reports")
	if err != nil || info.Kind != redislock.KindLock || info.Held != 2 || info.LastFencingToken != r2.FencingToken {
		t.Fatalf("Describe of readers = %+v, %v", info, err)
	}
	owners := []string{info.Holders[0].Owner, info.Holders[1].Owner}
	slices.Sort(owners)
	if !slices.Equal(owners, []string{"r1", "r2"}) || info.Holders[0].Mode != redislock.Read {
		t.Fatalf("readers = %+v (first %+v)", info.Holders, r1)
	}

	lead, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "scheduler", Value: "10.0.0.7:8080", Owner: "node-a", TTL: minute})
	if err != nil {
		t.Fatal(err)
	}
	info, err = c.Describe(ctx, "scheduler")
	if err != nil || info.Kind != redislock.KindElection || info.Leader == nil || info.Leader.Owner != "node-a" ||
		info.Leader.FencingToken != lead.Leader().Term || info.Value != "10.0.0.7:8080" {
		t.Fatalf("Describe of an election = %+v (leader %+v), %v", info, info.Leader, err)
	}

	mustAcquire(t, c, permit("upstream", 3, "p1", minute))
	mustAcquire(t, c, permit("upstream", 3, "p2", minute))
	info, err = c.Describe(ctx, "upstream")
	if err != nil || info.Kind != redislock.KindSemaphore || info.Limit != 3 || info.Held != 2 || info.Holders[0].Mode != redislock.Permit {
		t.Fatalf("Describe of a semaphore = %+v, %v", info, err)
	}

	if _, err := c.Describe(ctx, ""); !errors.Is(err, redislock.ErrInvalidKey) {
		t.Fatalf("Describe of an empty key: %v", err)
	}
}

// contractForceRelease ends a holder kept alive by KeepAlive: the
// KeepAlive ends with ErrNotHeld, a waiting writer gets the lock with a
// greater fencing token, and the evicted lease stays gone.
func contractForceRelease(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 60*time.Second)
	old := mustAcquire(t, c, redislock.Request{Key: "stuck", Mode: redislock.Write, Owner: "stuck-worker", TTL: 3 * time.Second})
	kept := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	go func() {
		kept <- c.KeepAlive(ctx, "stuck", old.ID, 0, func(redislock.Lease) error {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	<-renewed // the stream keeps the lease
	got := make(chan redislock.Result, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: "stuck", Mode: redislock.Write, Owner: "next", TTL: minute, Wait: 45 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	waitUntil(t, "the writer waits", func() bool {
		info, err := c.Describe(ctx, "stuck")
		return err == nil && info.WaitingWriters == 1
	})

	if _, err := c.ForceRelease(ctx, "stuck", "someone-else"); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("ForceRelease of an owner holding nothing: %v, want ErrNotHeld", err)
	}
	ended, err := c.ForceRelease(ctx, "stuck", "stuck-worker")
	if err != nil || len(ended) != 1 || ended[0].Owner != "stuck-worker" || ended[0].FencingToken != old.FencingToken {
		t.Fatalf("ForceRelease = %+v, %v", ended, err)
	}
	// The evicted holder's KeepAlive ends first, NOT_FOUND; then the
	// waiter is granted (the evicted lease, kept alive, would have run
	// for ever).
	var res redislock.Result
	select {
	case err := <-kept:
		if !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("evicted KeepAlive ended with %v, want ErrNotHeld", err)
		}
	case res = <-got:
		t.Fatalf("the waiter was granted %+v while the evicted holder's KeepAlive still ran", res)
	case <-time.After(30 * time.Second):
		t.Fatal("the evicted holder's KeepAlive did not end")
	}
	select {
	case res = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting writer was not granted the lock")
	}
	if !res.Acquired || res.Lease.FencingToken <= old.FencingToken {
		t.Fatalf("waiter got %+v after the force release of token %d", res, old.FencingToken)
	}
	if _, err := c.Renew(ctx, "stuck", old.ID, 0); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("evicted Renew: %v, want ErrNotHeld", err)
	}

	// The waiters are woken by the release itself: with re-checks
	// pushed out of reach and a lease of ten minutes, only the wake-up can
	// let the waiter in within its wait.
	slow := b.newClient(t, redislock.Options{MaxRecheck: time.Hour})
	mustAcquire(t, slow, redislock.Request{Key: "long", Mode: redislock.Write, Owner: "x", TTL: 10 * time.Minute})
	woken := make(chan redislock.Result, 1)
	go func() {
		res, err := slow.Acquire(ctx, redislock.Request{Key: "long", Mode: redislock.Write, Owner: "y", TTL: minute, Wait: 5 * time.Minute})
		if err != nil {
			t.Error(err)
		}
		woken <- res
	}()
	waitUntil(t, "the writer waits for the long lease", func() bool {
		info, err := slow.Describe(ctx, "long")
		return err == nil && info.WaitingWriters == 1
	})
	if _, err := slow.ForceRelease(ctx, "long", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-woken:
		if !res.Acquired {
			t.Fatalf("woken waiter got %+v", res)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the waiter was not woken by the force release")
	}

	// An election's leader: the election has no leader until a candidate
	// is elected, with a higher term.
	lead, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "leader", Owner: "a", TTL: minute})
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan error, 1)
	go func() { led <- lead.Keep(ctx, func(redislock.Leader) {}) }()
	if _, err := c.ForceRelease(ctx, "leader", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx, "leader"); !errors.Is(err, redislock.ErrNoLeader) {
		t.Fatalf("Leader after the leader's force release: %v, want ErrNoLeader", err)
	}
	if err := <-led; !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("the evicted leader's Keep ended with %v, want ErrNotHeld", err)
	}
	next, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "leader", Owner: "b", TTL: minute})
	if err != nil || next.Leader().Term <= lead.Leader().Term {
		t.Fatalf("next leader = %+v, %v (old term %d)", next, err, lead.Leader().Term)
	}

	// Every holder of a semaphore, with an empty owner.
	for i := range 3 {
		mustAcquire(t, c, permit("pool", 3, fmt.Sprint("p", i), minute))
	}
	if ended, err := c.ForceRelease(ctx, "pool", ""); err != nil || len(ended) != 3 {
		t.Fatalf("ForceRelease of every permit = %+v, %v", ended, err)
	}
	if info, err := c.Describe(ctx, "pool"); err != nil || info.Held != 0 || info.Kind != redislock.KindNone {
		t.Fatalf("semaphore after = %+v, %v", info, err)
	}
	if _, err := c.ForceRelease(ctx, "", ""); !errors.Is(err, redislock.ErrInvalidKey) {
		t.Fatalf("ForceRelease of an empty key: %v", err)
	}
}

// contractListLocks pages through held keys under a prefix with small
// pages: every held key exactly once, free keys and other prefixes left
// out, and a page token of another listing refused.
func contractListLocks(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 60*time.Second)
	want := map[string]bool{}
	for i := range 23 {
		key := fmt.Sprintf("jobs/%02d{x}*?", i)
		want[key] = true
		mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "o", TTL: minute})
	}
	mustAcquire(t, c, redislock.Request{Key: "other/1", Mode: redislock.Write, TTL: minute})
	freed := mustAcquire(t, c, redislock.Request{Key: "jobs/freed", Mode: redislock.Write, TTL: minute})
	if _, err := c.Release(ctx, "jobs/freed", freed.ID, ""); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	token, pages := "", 0
	for {
		page, err := c.List(ctx, redislock.ListOptions{Prefix: "jobs/", PageSize: 5, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Locks) > 5 {
			t.Fatalf("page of %d locks, want at most 5", len(page.Locks))
		}
		for _, l := range page.Locks {
			seen[l.Key]++
			if l.Kind != redislock.KindLock || len(l.Holders) != 1 || l.Holders[0].Owner != "o" {
				t.Fatalf("listed %+v", l)
			}
		}
		pages++
		if token = page.Next; token == "" {
			break
		}
		if pages > 100 {
			t.Fatal("listing does not end")
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("listed %v, want %v", seen, want)
	}
	for k, n := range seen {
		if !want[k] || n != 1 {
			t.Fatalf("listed %q %d times", k, n)
		}
	}
	// Keep leaves keys out.
	page, err := c.List(ctx, redislock.ListOptions{PageSize: 500, Keep: func(k string) bool { return k == "other/1" }})
	for page.Next != "" && err == nil && len(page.Locks) == 0 {
		page, err = c.List(ctx, redislock.ListOptions{PageSize: 500, PageToken: page.Next, Keep: func(k string) bool { return k == "other/1" }})
	}
	if err != nil || len(page.Locks) != 1 || page.Locks[0].Key != "other/1" {
		t.Fatalf("List with Keep = %+v, %v", page, err)
	}
	first, err := c.List(ctx, redislock.ListOptions{Prefix: "jobs/", PageSize: 1})
	if err != nil || first.Next == "" {
		t.Fatal(first, err)
	}
	for _, bad := range []string{first.Next + "x", "!!", "e30"} {
		_, err := c.List(ctx, redislock.ListOptions{Prefix: "other/", PageToken: bad})
		if !errors.Is(err, redislock.ErrInvalidPageToken) {
			t.Errorf("page token %q of another listing: %v, want ErrInvalidPageToken", bad, err)
		}
	}
}
