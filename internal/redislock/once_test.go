package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// frozenPastReadTimeout runs call while Redis is frozen for longer than the
// client's read timeout, and waits until Redis has run whatever reached it.
// go-redis's default MaxRetries (3) would send a timed-out script again on
// another idle connection of the pool (the clients here keep several);
// Redis, once thawed, would run every copy.
func frozenPastReadTimeout(t *testing.T, rs *redistest.Server, rdb *redis.Client, call func(ctx context.Context) error) {
	t.Helper()
	rs.Freeze()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- call(ctx)
	}()
	// Long enough for every retry go-redis would make to be sent.
	time.Sleep(2500 * time.Millisecond)
	rs.Thaw()
	if err := <-done; err == nil {
		t.Fatal("the call answered although Redis was frozen past the read timeout")
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// warmUp has Redis cache the scripts (a re-entry and both releases), so
// that a call sent while Redis is frozen is run when it thaws rather than
// refused with NOSCRIPT, and fills the client's pool.
func warmUp(t *testing.T, c *redislock.Client, rdb *redis.Client) {
	t.Helper()
	// Several idle connections in the pool, for go-redis to retry on.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb.Do(context.Background(), "DEBUG", "SLEEP", "0.05")
		}()
	}
	wg.Wait()
	req := redislock.Request{Key: "once/warm-up", Mode: redislock.Write, Owner: "o", TTL: time.Minute}
	l := mustAcquire(t, c, req)
	mustAcquire(t, c, req)
	for range 2 {
		if _, err := c.Release(context.Background(), req.Key, l.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOneReleaseTakesOneHold releases one of two holds while Redis is frozen
// past the client's read timeout: the call fails, and exactly one hold is
// gone once Redis runs it — never both.
func TestOneReleaseTakesOneHold(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ReadTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, redislock.Options{})
	warmUp(t, c, rdb)
	req := redislock.Request{Key: "once/release", Mode: redislock.Write, Owner: "o", TTL: time.Minute}
	l := mustAcquire(t, c, req)
	mustAcquire(t, c, req)
	frozenPastReadTimeout(t, rs, rdb, func(ctx context.Context) error {
		_, err := c.Release(ctx, req.Key, l.ID, "")
		return err
	})
	info, err := c.Describe(context.Background(), req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != 1 || info.Holders[0].HoldCount != 1 {
		t.Fatalf("after one Release of two holds: holders %+v, want one lease held once", info.Holders)
	}
}

// TestOneAcquireAddsOneHold re-enters a lease while Redis is frozen past the
// client's read timeout: the call fails and its hold is undone, so the
// lease is held once, as before the call — not two or three times.
func TestOneAcquireAddsOneHold(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ReadTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, redislock.Options{})
	warmUp(t, c, rdb)
	req := redislock.Request{Key: "once/acquire", Mode: redislock.Write, Owner: "o", TTL: time.Minute}
	mustAcquire(t, c, req)
	frozenPastReadTimeout(t, rs, rdb, func(ctx context.Context) error {
		_, err := c.Acquire(ctx, req)
		return err
	})
	ctx := ctxT(t, 10*time.Second)
	for {
		info, err := c.Describe(ctx, req.Key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Holders) != 1 {
			t.Fatalf("holders %+v, want the one lease", info.Holders)
		}
		if info.Holders[0].HoldCount == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lease is held %d times after one lost re-entry, want once", info.Holders[0].HoldCount)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRetriedReleaseReplaysItsResult retries Releases with their request
// ids, for a lease held once (kept as a string) and one held twice (kept
// as a hash): every retry answers the first call's hold count, also once
// the lease has ended, and takes nothing more away.
func TestRetriedReleaseReplaysItsResult(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := newClient(t, rdb, redislock.Options{DataLossGrace: time.Minute})
	ctx := ctxT(t, 20*time.Second)
	for holds := 1; holds <= 2; holds++ {
		req := redislock.Request{Key: fmt.Sprint("replay/release/", holds), Mode: redislock.Write, Owner: "o", TTL: time.Minute}
		var l redislock.Lease
		for range holds {
			l = mustAcquire(t, c, req)
		}
		for left := holds - 1; left >= 0; left-- {
			rid := "rel-" + string(rune('a'+left))
			for try := range 3 {
				n, err := c.Release(ctx, req.Key, l.ID, rid)
				if err != nil || int(n) != left {
					t.Fatalf("%d holds, release %s try %d = %d, %v; want %d", holds, rid, try, n, err, left)
				}
			}
		}
		mustAcquire(t, c, redislock.Request{Key: req.Key, Mode: redislock.Write, Owner: "next", TTL: time.Second})
		if _, err := c.Release(ctx, req.Key, l.ID, "rel-z"); !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("a new release of the ended lease = %v, want ErrNotHeld", err)
		}
	}
}

// lostReply is a go-redis hook that runs the first acquire script of owner
// in Redis but tells the caller its reply was lost, as a connection reset
// after the script ran would; and holds back every undo (abandon.lua) by
// undoDelay, so that an undo sent in the background lands after whatever
// its caller does next.
type lostReply struct {
	*lateSends
	owner string
	n     atomic.Int32
}

func (*lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (l *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(cmd.Args()) > 1 {
			if script, _ := cmd.Args()[1].(string); script == l.undoSHA || script == l.undo {
				time.Sleep(l.undoDelay)
			}
		}
		err := next(ctx, cmd)
		if (&lateReplies{owner: l.owner}).carriesOwner(cmd) && l.n.Add(-1) >= 0 {
			err = errors.New("read: connection reset by peer")
			cmd.SetErr(err)
		}
		return err
	}
}

// TestAWaitingAcquireNeverAnswersTwoHolds: a waiting Acquire without a
// request id whose first try was granted with the reply lost goes on
// waiting; its next try must not re-enter that unheard grant (the same
// owner) and answer two holds for one call: the grant is undone first.
func TestAWaitingAcquireNeverAnswersTwoHolds(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	lost := &lostReply{owner: "once", lateSends: newLateSends(t, "nobody", 0, 500*time.Millisecond)}
	rdb.AddHook(lost)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 30*time.Second)
	warmUp(t, c, rdb) // the scripts cached: the first try sent is the one run
	lost.n.Store(1)
	res, err := c.Acquire(ctx, redislock.Request{Key: "once/waiting", Mode: redislock.Write, Owner: "once", TTL: time.Minute, Wait: 10 * time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("the waiting call = %+v, %v", res, err)
	}
	if res.Lease.HoldCount != 1 {
		t.Fatalf("one Acquire answered %d holds", res.Lease.HoldCount)
	}
	info, err := c.Describe(ctx, "once/waiting")
	if err != nil || len(info.Holders) != 1 || info.Holders[0].HoldCount != 1 {
		t.Fatalf("the key after one Acquire: %+v, %v", info.Holders, err)
	}
}
