package redislock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// stuckSend is a go-redis hook that holds the first acquire script of
// owner back, as a Redis frozen with it in its socket would: the caller is
// told at once that the reply timed out, and the very same command reaches
// Redis after delay, on a connection of its own, so that the undo lockd
// sends meanwhile runs first.
type stuckSend struct {
	owner string
	delay time.Duration
	late  *redis.Client
	n     atomic.Int32
	done  chan error
}

func (*stuckSend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*stuckSend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *stuckSend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" || !(&lateReplies{owner: s.owner}).carriesOwner(cmd) || s.n.Add(-1) < 0 {
			return next(ctx, cmd)
		}
		args := cmd.Args()
		go func() {
			time.Sleep(s.delay)
			s.done <- s.late.Do(context.Background(), args...).Err()
		}()
		err := errors.New("read tcp: i/o timeout")
		cmd.SetErr(err)
		return err
	}
}

// TestATryStillOnItsWayIsUndoneOrRefused: an Acquire whose script is stuck
// on its way to Redis fails for its caller, and lockd undoes what it may
// do; the undo runs first and finds nothing. Whenever the script arrives,
// it must not leave a hold behind that the same owner's next Acquire would
// re-enter and answer two holds for: arriving before lockd's deadline for
// it, the undo, tried again, takes it back; arriving after, it does
// nothing.
func TestATryStillOnItsWayIsUndoneOrRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{"arriving before the deadline", 150 * time.Millisecond},
		{"arriving after the deadline", 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := srv.Client(t)
			stuck := &stuckSend{owner: "stuck", delay: tc.delay, late: srv.Client(t), done: make(chan error, 1)}
			rdb.AddHook(stuck)
			c := newClient(t, rdb, redislock.Options{})
			warmUp(t, c, rdb) // the scripts cached, Redis's clock known
			key := "stuck/" + tc.name
			stuck.n.Store(1)
			actx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if _, err := c.Acquire(actx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "stuck", TTL: time.Minute}); err == nil {
				t.Fatal("the stuck Acquire succeeded")
			}
			if err := <-stuck.done; err != nil && !errors.Is(err, redis.Nil) {
				t.Logf("the stuck script, once it arrived: %v", err)
			}
			// Whatever it did is gone soon after it arrived.
			ctx := ctxT(t, 30*time.Second)
			for {
				info, err := c.Describe(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if len(info.Holders) == 0 {
					break
				}
				if ctx.Err() != nil || len(info.Holders) > 0 && time.Since(info.Holders[0].ExpireTime.Add(-time.Minute)) > 10*time.Second {
					t.Fatalf("the stuck try's grant stays: %+v", info.Holders)
				}
				time.Sleep(50 * time.Millisecond)
			}
			l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "stuck", TTL: time.Minute})
			if l.HoldCount != 1 {
				t.Fatalf("the owner's next Acquire answered %d holds", l.HoldCount)
			}
		})
	}
}

// TestALostReplyIsUndoneUnlessItsRetryClaimedIt: an Acquire with a
// request_id whose script ran but whose reply was lost answers an error,
// and its grant is undone like any other (SPEC: one call, one effect), so
// an Acquire under another request_id by the same owner holds once. A
// retry of the same request that gets there before the undo claims the
// grant: the undo then leaves it to the retry.
func TestALostReplyIsUndoneUnlessItsRetryClaimedIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, retry := range []bool{false, true} {
		name := "given up"
		if retry {
			name = "retried before the undo"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := srv.Client(t)
			lost := &lostReply{owner: "rid", lateSends: newLateSends(t, "nobody", 0, 500*time.Millisecond)}
			rdb.AddHook(lost)
			c := newClient(t, rdb, redislock.Options{})
			warmUp(t, c, rdb)
			key := "rid/" + name
			req := redislock.Request{Key: key, Mode: redislock.Write, Owner: "rid", TTL: time.Minute, RequestID: "first"}
			lost.n.Store(1)
			if _, err := c.Acquire(ctxT(t, 10*time.Second), req); err == nil {
				t.Fatal("the Acquire whose reply was lost succeeded")
			}
			if retry {
				res, err := c.Acquire(ctxT(t, 10*time.Second), req)
				if err != nil || !res.Acquired || res.Lease.HoldCount != 1 {
					t.Fatalf("the retry = %+v, %v; want the first grant, held once", res, err)
				}
			}
			time.Sleep(2 * time.Second) // the undo, held back 500ms, has run
			info, err := c.Describe(ctxT(t, 10*time.Second), key)
			if err != nil {
				t.Fatal(err)
			}
			if retry {
				if len(info.Holders) != 1 || info.Holders[0].HoldCount != 1 {
					t.Fatalf("the retry's lease after the undo: %+v, want it held once", info.Holders)
				}
				return
			}
			if len(info.Holders) != 0 {
				t.Fatalf("the lost grant stays: %+v", info.Holders)
			}
			l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "rid", TTL: time.Minute, RequestID: "second"})
			if l.HoldCount != 1 {
				t.Fatalf("the owner's next Acquire answered %d holds", l.HoldCount)
			}
		})
	}
}
