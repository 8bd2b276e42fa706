package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestWaitersRightAfterTheSweepAreWoken hands a lock over again and again
// while the idle-channel sweep runs all the time, so waiters keep
// subscribing to a channel whose unsubscribe is still on its way. Re-checks
// are pushed out to an hour: every waiter must be woken by the release
// message, and once all are gone nothing stays subscribed in Redis.
func TestWaitersRightAfterTheSweepAreWoken(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := New(rdb, Options{MaxRecheck: time.Hour})
	defer c.Close()
	c.subs.mu.Lock()
	c.subs.idle = time.Millisecond
	c.subs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const key, handoffs = "swept", 200
	// A waiter on another key keeps the pub/sub connection open, as on
	// any busy replica, so only the swept channel comes and goes.
	if res, err := c.Acquire(ctx, Request{Key: "busy", Mode: Write, Owner: "holder", TTL: time.Hour}); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	bctx, stopBusy := context.WithCancel(ctx)
	busyDone := make(chan struct{})
	go func() {
		defer close(busyDone)
		_, _ = c.Acquire(bctx, Request{Key: "busy", Mode: Write, Owner: "waiter", TTL: time.Hour, Wait: time.Hour})
	}()
	for c.subs.active() == 0 {
		time.Sleep(time.Millisecond)
	}
	missed := 0
	for i := range handoffs {
		// Vary when the next waiter subscribes relative to the sweep
		// that follows the last one leaving.
		time.Sleep(time.Duration(i%40) * 100 * time.Microsecond)
		holder, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "holder", TTL: time.Hour})
		if err != nil || !holder.Acquired {
			t.Fatal(holder, err)
		}
		got := make(chan Result, 1)
		go func() {
			res, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "waiter", TTL: time.Hour, Wait: 2 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- res
		}()
		// Let the waiter subscribe; if it has not yet, its re-check after
		// subscribing finds the lock free, which is fine too.
		time.Sleep(2 * time.Millisecond)
		if _, err := c.Release(ctx, key, holder.Lease.ID, ""); err != nil {
			t.Fatal(err)
		}
		res := <-got
		if !res.Acquired {
			missed++
			continue
		}
		if _, err := c.Release(ctx, key, res.Lease.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	stopBusy()
	<-busyDone
	if missed > 0 {
		t.Errorf("%d of %d waiters were not woken by the release", missed, handoffs)
	}
	ks := c.keys(key)
	deadline := time.Now().Add(20 * time.Second)
	for c.subs.active() != 0 || rdb.PubSubNumSub(ctx, ks.channel).Val()[ks.channel] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after every waiter left: %d channels tracked, %d subscriptions in Redis",
				c.subs.active(), rdb.PubSubNumSub(ctx, ks.channel).Val()[ks.channel])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
