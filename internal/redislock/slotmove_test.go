package redislock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// TestWaitersFollowAMovedSlot moves the slot of a lock whose channel was
// subscribed to another master: the old subscription goes, and the next
// waiter subscribes on the new master and is woken by a release there
// (re-checks are pushed out of the way, so only the message can wake it).
func TestWaitersFollowAMovedSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	rdb := cl.ClusterClient(t)
	c := New(rdb, Options{MaxRecheck: time.Hour})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "moving"
	ks := c.keys(key)

	// A waiter subscribes on the slot's master, then gives up.
	holder, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "a", TTL: time.Minute})
	if err != nil || !holder.Acquired {
		t.Fatal(holder, err)
	}
	if res, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "b", TTL: time.Minute, Wait: 200 * time.Millisecond}); err != nil || res.Acquired {
		t.Fatal(res, err)
	}
	if _, err := c.Release(ctx, key, holder.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	if c.subs.active() != 1 {
		t.Fatalf("%d channels subscribed, want the lock's one", c.subs.active())
	}

	// Move the (now empty) slot to another master.
	slot := int(rdb.ClusterKeySlot(ctx, ks.record).Val())
	from, err := rdb.MasterForKey(ctx, ks.record)
	if err != nil {
		t.Fatal(err)
	}
	var to *redis.Client
	var toID string
	for _, addr := range cl.Addrs() {
		if addr == from.Options().Addr {
			continue
		}
		to = redis.NewClient(&redis.Options{Addr: addr})
		defer to.Close()
		toID = to.ClusterMyID(ctx).Val()
		break
	}
	for _, addr := range cl.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil && !strings.Contains(err.Error(), "I still hold keys") {
			n.Close()
			t.Fatalf("SETSLOT on %s: %v", addr, err)
		}
		n.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.subs.active() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the old subscription was not let go")
		}
		time.Sleep(20 * time.Millisecond)
	}

	holder, err = c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "a", TTL: time.Minute})
	if err != nil || !holder.Acquired {
		t.Fatal(holder, err)
	}
	got := make(chan Result, 1)
	go func() {
		res, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "b", TTL: time.Minute, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	time.Sleep(300 * time.Millisecond) // let it subscribe; correctness does not depend on it
	if _, err := c.Release(ctx, key, holder.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if !res.Acquired {
			t.Fatalf("waiter after the slot moved: %+v", res)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken on the slot's new master")
	}
}
