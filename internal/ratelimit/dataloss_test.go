package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestRestartedEmptyGivesNoSecondBurst spends a limiter's burst, restarts
// Redis without its data, and takes again: with the lock engine's
// data-loss markers the limiter counts as spent at the loss, so the
// window bound holds across the restart (and the lock engine, sharing the
// marker, holds its grants back too). A limiter without them hands out a
// second burst: the failure the markers prevent.
func TestRestartedEmptyGivesNoSecondBurst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locks := redislock.New(rdb, redislock.Options{DataLossGrace: 5 * time.Second, WatchInterval: time.Hour})
	t.Cleanup(func() { _ = locks.Close() })
	watched := ratelimit.New(rdb, ratelimit.Options{DataLoss: locks})
	unwatched := ratelimit.New(rdb, ratelimit.Options{Prefix: "unwatched"})
	lim := ratelimit.Limit{Limit: 5, Period: time.Minute} // 12s apart
	for _, l := range []*ratelimit.Limiter{watched, unwatched} {
		for range 5 {
			if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); !res.Allowed {
				t.Fatalf("burst: %+v", res)
			}
		}
	}
	srv.Restart(t)

	res := takeAfterRestart(t, watched, ratelimit.Request{Key: "k", Limit: lim})
	if res.Allowed || res.RetryAfter <= 11*time.Second || res.RetryAfter > 12*time.Second {
		t.Errorf("after Redis lost its data: %+v, want refused for about 12s (a limiter spent at the loss)", res)
	}
	acq, err := locks.Acquire(ctxT(t, 10*time.Second), redislock.Request{Key: "lock", Mode: redislock.Write, TTL: time.Second})
	if err != nil || acq.Acquired {
		t.Errorf("the lock engine did not see the loss the limiter found: %+v, %v", acq, err)
	}
	if res := takeAfterRestart(t, unwatched, ratelimit.Request{Key: "k", Limit: lim}); !res.Allowed {
		t.Errorf("without the markers: %+v; want the second burst they prevent", res)
	}
}

// TestRestoredLimiterIsDistrusted keeps the limiter's key but marks its
// slot as having lost data (as the lock engine's watch does when Redis
// restarted from an older snapshot, or failed over): the limiter, last
// written before the loss, counts as spent at the loss.
func TestRestoredLimiterIsDistrusted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locks := redislock.New(rdb, redislock.Options{DataLossGrace: 5 * time.Second, WatchInterval: time.Hour})
	t.Cleanup(func() { _ = locks.Close() })
	l := ratelimit.New(rdb, ratelimit.Options{DataLoss: locks})
	lim := ratelimit.Limit{Limit: 5, Period: time.Minute}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); !res.Allowed || res.Remaining != 4 {
		t.Fatalf("first take: %+v", res)
	}
	ctx := ctxT(t, 10*time.Second)
	marker, grace := locks.DataLossMarker(redislock.HashTag("k"))
	redisNow, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	paused := redisNow.Add(time.Millisecond).Add(grace).UnixMilli()
	if err := rdb.Set(ctx, marker, paused, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); res.Allowed {
		t.Errorf("a limiter written before a loss was trusted: %+v", res)
	}
	// Written since, it is trusted again: one more comes 12s later, not
	// a whole period after the loss.
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "w"}); res.Allowed || res.RetryAfter > 12*time.Second {
		t.Errorf("after the loss: %+v", res)
	}
}

// takeAfterRestart takes, retrying while the client's connections to the
// old process fail.
func takeAfterRestart(t *testing.T, l *ratelimit.Limiter, req ratelimit.Request) ratelimit.Result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := l.Take(ctxT(t, 10*time.Second), req)
		if err == nil {
			return res
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
