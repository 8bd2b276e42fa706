package faults

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// replicaLag is how far behind its master the replica runs in
// TestSentinelFailoverToLaggingReplica: longer than the workload's ttl, so
// that every lease the replica has received has run out when it takes
// over, and the keys of the leases granted since look free.
const replicaLag = 1500 * time.Millisecond

// TestSentinelFailoverToLaggingReplica fails the master over (SENTINEL
// FAILOVER) to a replica that runs behind it: its replication link goes
// through a proxy that delays it. The leases granted within the lag are
// lost with the old master, as on any failover of asynchronous
// replication. No double grant is excused: lockd must notice the new
// master before it grants anything on it (it has never checked this
// server's data), end the holders' KeepAlive streams with NOT_FOUND and
// hold new grants back, so holders learn first. Contenders try every key
// without waiting all along, so a key that looks free on the new master
// for a moment is taken then. Fencing tokens keep rising across it.
func TestSentinelFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	f := startFleet(t, 2, "--redis="+strings.Join(st.SentinelAddrs(), ","), "--redis-master="+st.MasterName())
	w := defaultWorkload("failover")
	res := scenario{
		name:     "Sentinel failover to a lagging replica",
		fault:    fmt.Sprintf("SENTINEL FAILOVER to a replica whose replication link lags %v (1 master, 1 replica, 3 sentinels; ttl %v; 2 contenders trying every 5ms); no double grant excused", replicaLag, w.TTL),
		workload: w, replicas: f.replicas, rdb: st.FailoverClient(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			if round == 0 {
				run.StartContenders(2, 5*time.Millisecond)
			}
			lagReplica(t, st, round)
			// The replica falls behind while grants go on.
			time.Sleep(2 * replicaLag)
			from := time.Now()
			st.Failover(t)
			run.LostData(from)
			return nil
		},
	}.run(t)
	expectClean(t, res)
}

// lagReplica points the current master's replica at it through a proxy
// that delays the replication stream by replicaLag. Sentinel puts such a
// replica back on the master only failover-timeout (10s) after it notices,
// long after the failover this is for.
func lagReplica(t *testing.T, st *redistest.Sentinel, round int) {
	t.Helper()
	master := st.Master()
	if master == nil {
		t.Fatal("no master")
	}
	var replica *redistest.Server
	for _, n := range st.Nodes() {
		if n != master {
			replica = n
		}
	}
	link := NewProxy(t, fmt.Sprintf("replication-%d", round), master.Addr())
	_, port, _ := net.SplitHostPort(link.Addr())
	rc := replica.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rc.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
		t.Fatalf("REPLICAOF the proxy: %v", err)
	}
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_port:"+port+"\r") && strings.Contains(info, "master_link_status:up") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica did not sync through the proxy: %v\n%s", err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	link.Latency(t, replicaLag) // master to replica: the stream arrives replicaLag late
}
