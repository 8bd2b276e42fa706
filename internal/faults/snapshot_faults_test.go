package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestRedisRestartedFromOlderSnapshot restarts Redis from an RDB snapshot
// taken after lockd started, so lockd's data-loss markers are in it, while
// the leases granted since are not. Keys then look free that holders still
// believe they hold, and waiters are woken by their subscriptions coming
// back, and contenders try every key without waiting all along: lockd
// must notice before it grants anything on the restarted server, end the
// holders' KeepAlive streams with NOT_FOUND and hold new grants back, so
// no holder learns of its loss after another was granted its key.
func TestRedisRestartedFromOlderSnapshot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("snapshot")
	w.TTL = 2 * time.Second
	// Older than the ttl: every lease in the snapshot has run out by the
	// restart, so the keys of the leases granted since look free.
	age := w.TTL + w.TTL/2
	restarts := scaled(2, 1) // under chaos, three rounds of one
	res := scenario{
		name:     "Redis restarted from an older snapshot",
		fault:    fmt.Sprintf("Redis restarted (%d times) from an RDB snapshot taken %v before, after lockd started (ttl %v; 2 contenders trying every 5ms)", restarts, age, w.TTL),
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			if round == 0 {
				run.StartContenders(2, 5*time.Millisecond)
			}
			// The moment the restart opens lasts until lockd's check of
			// the server comes: twice, so that a check that happens to
			// come at once does not hide it.
			for i := range restarts {
				if i > 0 && !run.WaitHolds(run.Holds()+int64(scaled(15, 200)), progressTimeout) {
					t.Fatalf("no progress after restart %d", i)
				}
				snap := srv.Snapshot(t)
				// Leases granted from here on are not in the snapshot.
				if !run.WaitHolds(run.Holds()+int64(len(w.Keys)), progressTimeout) {
					t.Fatalf("no progress after the snapshot")
				}
				time.Sleep(age)
				from := time.Now()
				srv.RestartFrom(t, snap)
				run.LostData(from)
			}
			return nil
		},
	}.run(t)
	expectClean(t, res)
}
