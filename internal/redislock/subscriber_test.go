package redislock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestWaitersLeaveNothingBehind lets waiters give up and checks the shared
// subscription drops their channels once idle, and no writer stays queued.
func TestWaitersLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := New(rdb, Options{})
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Acquire(ctx, Request{Key: "busy", Mode: Write, Owner: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Write, Read} {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		res, err := c.Acquire(wctx, Request{Key: "busy", Mode: mode, Owner: "w", TTL: time.Minute, Wait: time.Minute})
		cancel()
		if err != nil || res.Acquired {
			t.Fatalf("%v waiter: %+v, %v", mode, res, err)
		}
	}
	h, _ := rdb.HGet(ctx, "lockd:{busy}", "h").Result()
	if parts := strings.Split(h, "|"); len(parts) > 2 && parts[2] != "" && parts[2] != "0" {
		t.Fatalf("%s writers still queued", parts[2])
	}
	// The sweep lets the channel go, and the unsubscribe (or the closed
	// connection) reaches Redis a moment later.
	const channel = "lockd:{busy}:released"
	deadline := time.Now().Add(10 * time.Second)
	for c.subs.active() != 0 || rdb.PubSubNumSub(ctx, channel).Val()[channel] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after their waiters left: %d channels tracked, %d subscribers in Redis",
				c.subs.active(), rdb.PubSubNumSub(ctx, channel).Val()[channel])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
