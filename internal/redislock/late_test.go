package redislock_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// lateReplies holds back the replies of the next n scripts run for owner,
// by delay each, as a slow network or a long pause of lockd's would; with
// early, it holds back the calls instead, as a Redis that is frozen, so
// the script runs late and its lease still runs when the reply comes.
type lateReplies struct {
	owner string
	delay time.Duration
	early bool
	n     atomic.Int32
	// undoDelay holds back each undo of owner's holds (abandon.lua).
	undoDelay time.Duration
}

// isUndo reports whether cmd runs abandon.lua for owner, undoing a hold:
// its ARGV are attempt, mode, owner, '1', ...
func (l *lateReplies) isUndo(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 3 {
		return false
	}
	keys, ok := args[2].(int)
	if !ok {
		return false
	}
	argv := args[3+keys:]
	return len(argv) >= 7 && argv[2] == l.owner && argv[3] == "1"
}

func (*lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if l.undoDelay > 0 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && l.isUndo(cmd) {
			time.Sleep(l.undoDelay)
		}
		if l.early && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && l.carriesOwner(cmd) && l.n.Add(-1) >= 0 {
			time.Sleep(l.delay)
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if err == nil && !l.early && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && l.carriesOwner(cmd) && l.n.Add(-1) >= 0 {
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
// holds back every undo of a hold (abandon.lua) by undoDelay, so that an
// undo sent in the background reaches Redis after whatever its caller does
// next.
type lateSends struct {
	owner     string
	delay     time.Duration
	undoDelay time.Duration
	undo      string // abandon.lua as lockd sends it, and its SHA-1
	undoSHA   string
	n         atomic.Int32
	// fail makes that many scripts for owner fail unsent, after the n
	// held back, as a Redis that froze again would.
	fail atomic.Int32
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
	// As lockScript builds it: what a fast path hands on, then the rest.
	undo := "local pre_time, pre_marker\n" + string(common) + string(abandon)
	return &lateSends{owner: owner, delay: delay, undoDelay: undoDelay, undo: undo, undoSHA: redis.NewScript(undo).Hash()}
}

// undoesHold reports whether cmd, an abandon.lua call, undoes a hold: its
// ARGV are attempt, mode, owner, '1', ...
func undoesHold(cmd redis.Cmder) bool {
	args := cmd.Args()
	keys, ok := args[2].(int)
	if !ok || len(args) < 3+keys+4 {
		return false
	}
	return args[3+keys+3] == "1"
}

func (*lateSends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*lateSends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lateSends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(cmd.Args()) > 1 {
			if script, _ := cmd.Args()[1].(string); script == l.undoSHA || script == l.undo {
				if undoesHold(cmd) {
					time.Sleep(l.undoDelay)
				}
			} else if (&lateReplies{owner: l.owner}).carriesOwner(cmd) {
				if l.n.Add(-1) >= 0 {
					time.Sleep(l.delay)
				} else if l.fail.Add(-1) >= 0 {
					err := errors.New("connection reset by peer")
					cmd.SetErr(err)
					return err
				}
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

// TestALateGrantIsNotReplayedToItsOwnRetry: a waiting call with a request
// id whose grant ran late (sent before Redis froze, run after) tries again
// within its wait while the late grant, still held in Redis, is being
// undone. The retry must not take the late lease as its own through the
// request id: the lease it is handed stays held.
func TestALateGrantIsNotReplayedToItsOwnRetry(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	late := &lateReplies{owner: "late", delay: 400 * time.Millisecond, early: true, undoDelay: 200 * time.Millisecond}
	rdb.AddHook(late)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, time.Minute)
	const key = "late/replayed"
	late.n.Store(1)
	res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "late", TTL: 300 * time.Millisecond,
		Wait: 20 * time.Second, RequestID: "once"})
	if err != nil || !res.Acquired {
		t.Fatalf("waiting call = %+v, %v", res, err)
	}
	if late.n.Load() > 0 {
		t.Fatal("the grant was not held back")
	}
	// The late grant's undo runs at once in the background; the lease
	// handed out must outlive it.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Renew(ctx, key, res.Lease.ID, 300*time.Millisecond); err != nil {
			t.Fatalf("the lease handed out after a late grant: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestALateGrantIsNotEndedUnderTheCallersRetry: a waiting call's grant
// comes late, and its next try fails (Redis froze again); the call goes on
// waiting and tries again with the same request id, as a caller hearing
// UNAVAILABLE would. The lease that try is handed stays held: the late
// grant is not being undone behind it.
func TestALateGrantIsNotEndedUnderTheCallersRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const ttl = 3 * time.Second
	late := newLateSends(t, "late", ttl+200*time.Millisecond, 300*time.Millisecond)
	rdb.AddHook(late)
	c := redislock.New(rdb, redislock.Options{})
	defer c.Close()
	ctx := ctxT(t, time.Minute)
	const key = "late/caller retries"
	req := redislock.Request{Key: key, Mode: redislock.Write, Owner: "late", TTL: ttl, Wait: 20 * time.Second, RequestID: "retried"}
	// Redis knows the script already: the first try sent is the one run.
	mustAcquire(t, c, redislock.Request{Key: key + " before", Mode: redislock.Write, Owner: "before", TTL: time.Minute})

	late.n.Store(1)
	late.fail.Store(1)
	res, err := c.Acquire(ctx, req)
	if err != nil || !res.Acquired {
		t.Fatalf("a call whose try after a late grant failed = %+v, %v; want the grant, claimed by its next try", res, err)
	}
	if late.fail.Load() > 0 {
		t.Fatal("no try failed after the late grant")
	}
	// Every clean-up has landed once Close returns.
	_ = c.Close()
	other := newClient(t, srv.Client(t), redislock.Options{})
	if _, err := other.Renew(ctx, key, res.Lease.ID, time.Minute); err != nil {
		t.Fatalf("the lease the caller's retry was told it holds (%+v): %v", res.Lease, err)
	}
	mustRefuse(t, other, redislock.Request{Key: key, Mode: redislock.Write, Owner: "next", TTL: time.Minute})
}
