package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestLeaderRedisFrozen runs elections instead of locks (ElectionService:
// candidates campaign for a few names, lead, write with their term and
// resign) and freezes Redis with SIGSTOP for longer than the leaderships'
// ttl: every leader learns its leadership is lost before another candidate
// is elected, one leader leads each name at a time, and the resources
// fenced by terms accept no deposed leader's write after its successor's.
func TestLeaderRedisFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("leader")
	w.Elect = true
	res := scenario{
		name: "leader's Redis frozen", fault: fmt.Sprintf("elections (Campaign) instead of locks; SIGSTOP Redis for %v (ttl %v)", 3*w.TTL, w.TTL),
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		prepare: func(run *Run) { run.Elections = f.elections },
		inject: func(t *testing.T, run *Run, round int) []Window {
			// Leaderships run in step (the workload's warm-up ends as a
			// batch of them resigns): freeze once a new leader leads, so
			// the freeze has leaders to depose.
			if !run.WaitElected(run.Elected()+1, progressTimeout) {
				t.Fatalf("no leader elected in %v", progressTimeout)
			}
			srv.Freeze()
			time.Sleep(3 * w.TTL)
			srv.Thaw()
			return nil
		},
	}.run(t)
	expectClean(t, res)
	if res.LossReports == 0 {
		t.Errorf("no leader was told of its loss: the freeze did not depose anyone")
	}
}
