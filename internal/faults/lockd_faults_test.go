package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestKillLockd kills one of three lockd processes on a 3-master Redis
// Cluster with SIGKILL while clients hold and wait for locks through it:
// they resume their KeepAlive streams and retry on the others, and the
// contract holds throughout.
func TestKillLockd(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	f := startFleet(t, 3, "--redis="+strings.Join(cl.Addrs(), ","))
	res := scenario{
		name: "kill -9 lockd", fault: "SIGKILL one of 3 lockd processes (Redis Cluster, 3 masters)",
		workload: defaultWorkload("kill"), replicas: f.replicas, rdb: cl.ClusterClient(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			victim := f.procs[round%len(f.procs)]
			victim.Kill()
			if !run.WaitHolds(run.Holds()+int64(scaled(20, 100)), progressTimeout) {
				t.Fatalf("no progress after killing lockd %s", victim.Addr)
			}
			victim.Restart(t)
			return nil
		},
	}.run(t)
	expectClean(t, res)
}

// TestClientPaused pauses one client in the middle of a write for longer
// than its ttl (a GC pause: its Renew calls stop too) until another client
// was granted the key and wrote. The paused client's late write is the
// stale write fencing exists for: the fenced resource rejects it. Its
// overlap on the plain resource is counted as stale, not as a violation.
func TestClientPaused(t *testing.T) {
	t.Parallel()
	res := pausedRun(t, "client paused", false)
	expectClean(t, res)
	if res.StaleWritesRejected == 0 {
		t.Errorf("the paused client's stale write was not rejected")
	}
}

// TestNestedReentry runs the workload with nested code: every hold
// re-enters its lease, as the same owner, with a ttl a tenth of the
// lease's, while KeepAlive keeps the lease alive with its own ttl. No
// fault is injected: re-entry never shortens a lease, so the key is never
// granted to another while its holder works.
func TestNestedReentry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("nested")
	w.TTL = 2 * time.Second
	w.Reenter = true
	res := scenario{
		name: "nested re-entry", fault: "none: each hold re-enters with ttl/10 (200ms) under a 2s KeepAlive lease",
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
	}.run(t)
	expectClean(t, res)
}
