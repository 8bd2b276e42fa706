package redislock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestRestartFromAnOlderSnapshotReachesHoldersFirst restarts Redis from an
// RDB snapshot taken after the engine started: lockd's markers are in it,
// the lease granted since is not. Only the new server's identity can tell
// (the poll is an hour away here): the first connection to it must hold
// grants back before anything runs on it, so the holder's KeepAlive ends
// with ErrNotHeld before the waiter is granted the key.
func TestRestartFromAnOlderSnapshotReachesHoldersFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	check := &redislock.IdentityCheck{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, OnConnect: check.OnConnect})
	t.Cleanup(func() { rdb.Close() })
	const grace = 2 * time.Second
	c := newClient(t, rdb, redislock.Options{DataLossGrace: grace, WatchInterval: time.Hour, IdentityCheck: check,
		MaxRecheck: 200 * time.Millisecond})
	ctx := ctxT(t, 2*time.Minute)
	if err := c.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	snapshot := srv.Snapshot(t)
	held := mustAcquire(t, c, redislock.Request{Key: "lost/snapshot", Mode: redislock.Write, Owner: "holder", TTL: time.Hour})

	var (
		mu     sync.Mutex
		events []string
	)
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	renewed := make(chan struct{}, 1)
	kept := make(chan error, 1)
	go func() {
		err := c.KeepAlive(ctx, "lost/snapshot", held.ID, 0, func(redislock.Lease) error {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return nil
		})
		record("holder told")
		kept <- err
	}()
	<-renewed
	waited := make(chan redislock.Result, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: "lost/snapshot", Mode: redislock.Write, Owner: "waiter", TTL: minute, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		record("waiter granted")
		waited <- res
	}()
	time.Sleep(100 * time.Millisecond) // let the waiter queue; the order below does not depend on it

	srv.RestartFrom(t, snapshot)
	var err error
	select {
	case err = <-kept:
	case res := <-waited:
		t.Fatalf("the waiter was granted %+v while the holder's KeepAlive still ran", res)
	case <-ctx.Done():
		t.Fatal("the holder's KeepAlive did not notice Redis restarting from an older snapshot")
	}
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("KeepAlive after the restart = %v, want ErrNotHeld", err)
	}
	res := <-waited
	if !res.Acquired || res.Lease.FencingToken <= held.FencingToken {
		t.Fatalf("waiter after the restart = %+v; holder's token %d", res, held.FencingToken)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0] != "holder told" {
		t.Fatalf("events %v: the holder must learn first", events)
	}
}
