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
