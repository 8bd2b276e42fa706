package redislock_test

import (
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
	if err := c.Prepare(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	snapshot := srv.Snapshot(t)
	holderLearnsFirst(t, c, "lost/snapshot", func() { srv.RestartFrom(t, snapshot) })
}
