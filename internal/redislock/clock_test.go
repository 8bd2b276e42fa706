package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestExpiryFollowsRedisClockNotTheHost runs the engine on a Redis whose
// clock says 2001: lease expiry is stated and decided by that clock, and a
// lease runs out when Redis's clock passes it, however little time passed on
// this host.
func TestExpiryFollowsRedisClockNotTheHost(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	past := time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC)
	mr.SetTime(past)
	mr.ClockTTL(true)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb, redislock.Options{})

	l := mustAcquire(t, c, redislock.Request{Key: "clock", Mode: redislock.Write, Owner: "a", TTL: time.Hour})
	if !l.ExpireTime.Equal(past.Add(time.Hour)) {
		t.Fatalf("ExpireTime = %v, want Redis's clock plus the ttl, %v", l.ExpireTime, past.Add(time.Hour))
	}
	if l.FencingToken != uint64(past.UnixMicro()) {
		t.Fatalf("fencing token %d, want Redis's clock in microseconds %d", l.FencingToken, past.UnixMicro())
	}
	mustRefuse(t, c, redislock.Request{Key: "clock", Mode: redislock.Write, Owner: "b", TTL: time.Hour})

	// An hour passes on Redis's clock, none on the host's.
	mr.SetTime(past.Add(time.Hour + time.Millisecond))
	b := mustAcquire(t, c, redislock.Request{Key: "clock", Mode: redislock.Write, Owner: "b", TTL: time.Hour})
	if b.FencingToken <= l.FencingToken {
		t.Fatalf("token %d after %d", b.FencingToken, l.FencingToken)
	}
	if _, err := c.Release(context.Background(), "clock", l.ID, ""); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Release of the expired lease: %v", err)
	}
}

// TestKeepAliveGivesUpBeforeTheLeaseRunsOut freezes Redis under a kept-alive
// lease: KeepAlive reports the lease lost before its expiry as last
// confirmed by Redis, so the holder stops before anyone else can be granted
// the lock.
func TestKeepAliveGivesUpBeforeTheLeaseRunsOut(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newClient(t, rdb, redislock.Options{})
	// A lease long enough that the give-up margin (a sixth of it) covers a
	// busy machine's scheduling delays.
	const ttl = 6 * time.Second
	l := mustAcquire(t, c, redislock.Request{Key: "frozen", Mode: redislock.Write, TTL: ttl})

	var lastRenewal time.Time
	renewals := 0
	done := make(chan error, 1)
	go func() {
		done <- c.KeepAlive(context.Background(), "frozen", l.ID, 0, func(redislock.Lease) error {
			lastRenewal = time.Now()
			renewals++
			if renewals == 2 {
				srv.Freeze()
			}
			return nil
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		srv.Thaw()
		t.Fatal("KeepAlive kept going with Redis frozen")
	}
	gaveUp := time.Now()
	srv.Thaw()
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("KeepAlive = %v, want ErrNotHeld", err)
	}
	// The lease was confirmed to run until at most lastRenewal + ttl.
	if !gaveUp.Before(lastRenewal.Add(ttl)) {
		t.Fatalf("gave up %v after the last renewal, not before the %v lease ran out", gaveUp.Sub(lastRenewal), ttl)
	}
}
