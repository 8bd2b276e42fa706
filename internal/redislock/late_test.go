package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// lateReplies holds back the replies of the next n scripts run for owner,
// by delay each, as a slow network or a long pause of lockd's would.
type lateReplies struct {
	owner string
	delay time.Duration
	n     atomic.Int32
}

func (*lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && l.carriesOwner(cmd) && l.n.Add(-1) >= 0 {
			time.Sleep(l.delay)
		}
		return err
	}
}

func (l *lateReplies) carriesOwner(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && s == l.owner {
			return true
		}
	}
	return false
}

// TestAGrantThatArrivesAfterItsLeaseIsNeverHeld: the reply granting a
// lease reaches lockd only after the lease has run out. The caller is not
// told it holds the lock (a waiting caller tries again within its wait),
// and what the late try did is undone without touching the next holder.
func TestAGrantThatArrivesAfterItsLeaseIsNeverHeld(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	late := &lateReplies{owner: "late", delay: 400 * time.Millisecond}
	rdb.AddHook(late)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, time.Minute)
	const ttl = 100 * time.Millisecond

	for _, tc := range []struct {
		name   string
		before func(key string) // what holds the key before the late call
		wait   time.Duration
	}{
		{name: "a fresh lease asked for once", before: func(string) {}},
		{name: "a re-entry asked for once", before: func(key string) {
			mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "late", TTL: ttl})
		}},
		{name: "a permit asked for once", before: func(string) {}},
		{name: "a waiting call", before: func(string) {}, wait: 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "late/" + tc.name
			mode, limit := redislock.Write, 0
			if tc.name == "a permit asked for once" {
				mode, limit = redislock.Permit, 2
			}
			tc.before(key)
			late.n.Store(1)
			res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: mode, Limit: limit, Owner: "late", TTL: ttl, Wait: tc.wait})
			if err != nil {
				t.Fatal(err)
			}
			if late.n.Load() > 0 {
				t.Fatal("the grant's reply was not held back")
			}
			if tc.wait > 0 {
				// Tried again within its wait: a lease that still runs.
				if !res.Acquired {
					t.Fatalf("a waiting call whose first grant came late: not acquired (retry after %v)", res.RetryAfter)
				}
				if _, err := c.Renew(ctx, key, res.Lease.ID, time.Minute); err != nil {
					t.Fatalf("the lease granted on the retry: %v", err)
				}
				return
			}
			if res.Acquired {
				t.Fatalf("a grant whose reply came %v after a %v lease was handed out as held: %+v", late.delay, ttl, res.Lease)
			}
			// The next holder keeps its lease while the late call's undo
			// runs its course.
			next := mustAcquire(t, c, redislock.Request{Key: key, Mode: mode, Limit: limit, Owner: "next", TTL: time.Minute})
			time.Sleep(300 * time.Millisecond)
			if l, err := c.Renew(ctx, key, next.ID, 0); err != nil || l.HoldCount != 1 {
				t.Fatalf("the next holder's lease: %+v, %v", l, err)
			}
		})
	}
}
