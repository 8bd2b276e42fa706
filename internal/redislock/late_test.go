package redislock_test

import (
	"context"
	"os"
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

// lateSends holds back the first script run for owner before it reaches
// Redis, by delay, as a frozen master that serves it once thawed would:
// lockd hears of the grant later than the lease may have run out by its own
// clock, although by Redis's clock the lease has only just begun. It also
// holds back every undo (abandon.lua) by undoDelay, so that an undo sent in
// the background reaches Redis after whatever its caller does next.
type lateSends struct {
	owner     string
	delay     time.Duration
	undoDelay time.Duration
	undo      string // abandon.lua as lockd sends it, and its SHA-1
	undoSHA   string
	n         atomic.Int32
}

func newLateSends(t *testing.T, owner string, delay, undoDelay time.Duration) *lateSends {
	t.Helper()
	common, err := os.ReadFile("common.lua")
	if err != nil {
		t.Fatal(err)
	}
	abandon, err := os.ReadFile("abandon.lua")
	if err != nil {
		t.Fatal(err)
	}
	undo := string(common) + string(abandon)
	return &lateSends{owner: owner, delay: delay, undoDelay: undoDelay, undo: undo, undoSHA: redis.NewScript(undo).Hash()}
}

func (*lateSends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*lateSends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lateSends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(cmd.Args()) > 1 {
			if script, _ := cmd.Args()[1].(string); script == l.undoSHA || script == l.undo {
				time.Sleep(l.undoDelay)
			} else if (&lateReplies{owner: l.owner}).carriesOwner(cmd) && l.n.Add(-1) >= 0 {
				time.Sleep(l.delay)
			}
		}
		return next(ctx, cmd)
	}
}

// TestALateGrantClaimedByItsRetryStaysHeld: a call's grant reaches lockd
// after its lease may have run out by lockd's clock (the request sat on a
// frozen master), so the call tries again at once: a waiting call within
// its wait, and a call with a request id even when it does not wait. A
// lease the caller is then told it holds stays held: nothing done about
// the late grant removes it afterwards, whether the retry re-read the
// first grant by its request id or re-entered the owner's lease.
func TestALateGrantClaimedByItsRetryStaysHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 3 * time.Second
	for _, tc := range []struct {
		name      string
		requestID string
		wait      time.Duration
	}{
		{name: "a waiting call with a request id", requestID: "retried", wait: 20 * time.Second},
		{name: "a waiting call without a request id", wait: 20 * time.Second},
		{name: "a call with a request id asked for once", requestID: "once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := srv.Client(t)
			late := newLateSends(t, "late", ttl+200*time.Millisecond, 300*time.Millisecond)
			rdb.AddHook(late)
			c := redislock.New(rdb, redislock.Options{})
			defer c.Close()
			ctx := ctxT(t, time.Minute)
			key := "late/claimed " + tc.name

			late.n.Store(1)
			res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "late", TTL: ttl,
				Wait: tc.wait, RequestID: tc.requestID})
			if err != nil {
				t.Fatal(err)
			}
			if late.n.Load() > 0 {
				t.Fatal("the first try was not held back")
			}
			if !res.Acquired {
				t.Fatalf("not acquired (retry after %v)", res.RetryAfter)
			}
			// Every clean-up of the late grant has landed once Close returns.
			_ = c.Close()

			other := newClient(t, srv.Client(t), redislock.Options{})
			if _, err := other.Renew(ctx, key, res.Lease.ID, time.Minute); err != nil {
				t.Fatalf("the lease the caller was told it holds (%+v): %v", res.Lease, err)
			}
			mustRefuse(t, other, redislock.Request{Key: key, Mode: redislock.Write, Owner: "next", TTL: time.Minute})
			// One Release, for the one Acquire, frees the key.
			if n, err := other.Release(ctx, key, res.Lease.ID, ""); err != nil || n != 0 {
				t.Fatalf("Release: hold count %d, %v", n, err)
			}
		})
	}
}
