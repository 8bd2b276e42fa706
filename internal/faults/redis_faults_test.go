package faults

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// TestRedisFrozen freezes Redis with SIGSTOP for longer than the leases'
// ttl while clients hold and wait: every holder learns of its loss before
// another is granted the key. Calls whose reply the freeze swallows leave
// nothing behind: a fresh Acquire without a request_id leaves no lease, a
// re-entry leaves no extra hold.
func TestRedisFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("frozen")
	probe := newLostReplyProbe(t, f, scaled(3, 10))
	res := scenario{
		name: "Redis frozen", fault: fmt.Sprintf("SIGSTOP Redis for %v (ttl %v), calls with a 300ms deadline meanwhile", 3*w.TTL, w.TTL),
		workload: w, replicas: f.replicas, rdb: rdb,
		inject: func(t *testing.T, run *Run, round int) []Window {
			srv.Freeze()
			probe.fire(t)
			time.Sleep(3 * w.TTL)
			srv.Thaw()
			return nil
		},
		after: func(t *testing.T, run *Run) []string { return probe.check(t) },
	}.run(t)
	expectClean(t, res)
}

// TestRedisRestartedEmpty restarts Redis without its data while clients
// hold and wait: lockd notices the loss, ends the holders' KeepAlive
// streams with NOT_FOUND and holds new grants back, so no holder learns
// of its loss after another was granted its key. Fencing tokens keep
// rising.
func TestRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("restart")
	w.TTL = 2 * time.Second
	res := scenario{
		name: "Redis restarted empty", fault: "Redis restarted without persistence (ttl 2s)",
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			from := time.Now()
			srv.Restart(t)
			run.LostData(from)
			return nil
		},
	}.run(t)
	expectClean(t, res)
}

// TestRedisLinkSlowThenBlackholed puts a TCP proxy between one of two lockd
// processes and Redis, adds latency, then drops all traffic for longer
// than the ttl, then heals. Holders on the cut-off replica learn of their
// loss before the other replica's clients are granted their keys.
func TestRedisLinkSlowThenBlackholed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := NewProxy(t, "redis", srv.Addr())
	cut := startFleet(t, 1, "--redis="+proxy.Addr())
	direct := startFleet(t, 1, "--redis="+srv.Addr())
	w := defaultWorkload("link")
	res := scenario{
		name: "Redis link slow, then blackholed", fault: fmt.Sprintf("proxy lockd→Redis: +50ms each way, then all traffic dropped for %v (ttl %v)", 3*w.TTL, w.TTL),
		workload: w, replicas: append(cut.replicas, direct.replicas...), rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			proxy.Latency(t, 50*time.Millisecond)
			run.WaitHolds(run.Holds()+20, progressTimeout)
			proxy.Blackhole(t)
			time.Sleep(3 * w.TTL)
			proxy.Heal(t)
			return nil
		},
	}.run(t)
	expectClean(t, res)
}

// TestClusterMasterFrozen freezes one master of a 3-master Cluster for
// longer than the ttl (but less than the cluster-node-timeout). Leases on
// the frozen master are lost and reported; leases on the healthy masters
// stay held: one stalled node costs no lease elsewhere.
func TestClusterMasterFrozen(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cc := cl.ClusterClient(t)
	f := startFleet(t, 2, "--redis="+strings.Join(cl.Addrs(), ","))
	w := defaultWorkload("stall")
	w.Keys = keysPerMaster(t, cc, "stall", scaled(2, 3))
	victim := cl.Nodes()[0]
	var from, to time.Time
	res := scenario{
		name: "Cluster master frozen", fault: fmt.Sprintf("SIGSTOP one of 3 Cluster masters for %v (ttl %v)", 2*w.TTL+w.TTL/2, w.TTL),
		workload: w, replicas: f.replicas, rdb: cc, once: true,
		inject: func(t *testing.T, run *Run, round int) []Window {
			from = time.Now()
			victim.Freeze()
			time.Sleep(2*w.TTL + w.TTL/2)
			victim.Thaw()
			to = time.Now()
			return nil
		},
		after: func(t *testing.T, run *Run) []string {
			var bad []string
			for _, e := range run.History.Events() {
				if e.Op != OpLost && e.Op != OpAbandon || e.Call.Before(from) || e.Call.After(to.Add(w.TTL)) {
					continue
				}
				if addr := masterOf(t, cc, e.Key); addr != victim.Addr() {
					bad = append(bad, fmt.Sprintf("key %q on healthy master %s: lease %s lost at %s while %s was frozen",
						e.Key, addr, short(e.Lease), stamp(e.Call), victim.Addr()))
				}
			}
			return bad
		},
	}.run(t)
	expectClean(t, res)
}

// keysPerMaster returns n keys whose lock lives on each Cluster master.
func keysPerMaster(t *testing.T, cc *redis.ClusterClient, prefix string, n int) []string {
	t.Helper()
	count := map[string]int{}
	var keys []string
	for i := 0; len(keys) < 3*n && i < 10000; i++ {
		key := prefix + "/" + strconv.Itoa(i)
		addr := masterOf(t, cc, key)
		if count[addr] < n {
			count[addr]++
			keys = append(keys, key)
		}
	}
	return keys
}

// masterOf returns the address of the Cluster master holding key's lock.
func masterOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cc.MasterForKey(ctx, "lockd:{"+key+"}")
	if err != nil {
		t.Fatalf("master of %q: %v", key, err)
	}
	return c.Options().Addr
}
