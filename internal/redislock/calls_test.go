package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

func scriptCalls(t *testing.T, rdb *redis.Client) int {
	return int(redistest.ScriptCalls(t, rdb))
}

// TestOneScriptCallPerOperation counts Redis round trips: an uncontended
// Acquire, a Release and each KeepAlive renewal cost one script call each.
func TestOneScriptCallPerOperation(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	// Load every script once, so EVALSHA finds them.
	warm := mustAcquire(t, c, redislock.Request{Key: "warm", Mode: redislock.Write, TTL: minute})
	_, _ = c.Renew(ctx, "warm", warm.ID, 0)
	_, _ = c.Release(ctx, "warm", warm.ID, "")

	before := scriptCalls(t, rdb)
	l := mustAcquire(t, c, redislock.Request{Key: "counted", Mode: redislock.Write, TTL: minute, Wait: time.Minute})
	if got := scriptCalls(t, rdb) - before; got != 1 {
		t.Fatalf("uncontended Acquire (with a wait allowed) made %d script calls, want 1", got)
	}
	before = scriptCalls(t, rdb)
	if _, err := c.Release(ctx, "counted", l.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := scriptCalls(t, rdb) - before; got != 1 {
		t.Fatalf("Release made %d script calls, want 1", got)
	}

	l = mustAcquire(t, c, redislock.Request{Key: "counted", Mode: redislock.Write, TTL: time.Second})
	before = scriptCalls(t, rdb)
	renewals := 0
	kctx, stop := context.WithCancel(ctx)
	err := c.KeepAlive(kctx, "counted", l.ID, 0, func(redislock.Lease) error {
		renewals++
		if renewals == 5 {
			stop()
		}
		return nil
	})
	if err == nil || kctx.Err() == nil {
		t.Fatalf("KeepAlive = %v", err)
	}
	if got := scriptCalls(t, rdb) - before; got != renewals {
		t.Fatalf("%d renewals made %d script calls", renewals, got)
	}
}
