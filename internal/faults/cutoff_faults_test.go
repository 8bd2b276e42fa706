package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// TestReplicaCutOffFromRedis cuts one of three lockd replicas off from
// Redis (its connections through a proxy are closed and new ones refused)
// while the other two stay connected, and holds the cut until the clients
// made progress through the others (at least 3 ttls). Holders on the cut
// replica lose their leases and must learn of it before anyone else is
// granted their keys; the clients move to the connected replicas and go on.
func TestReplicaCutOffFromRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := NewProxy(t, "redis-cutoff", srv.Addr())
	cut := startFleet(t, 1, "--redis="+proxy.Addr())
	rest := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("cutoff")
	warm := int64(scaled(15, 200))
	res := scenario{
		name:     "one replica cut off from Redis",
		fault:    fmt.Sprintf("the link of 1 of 3 lockd replicas to Redis cut (connections closed, new ones refused) for %v or more, until %d holds were made through the other two (ttl %v)", 3*w.TTL, warm, w.TTL),
		workload: w, replicas: append(cut.replicas, rest.replicas...), rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			proxy.Cut()
			from := run.Holds()
			time.Sleep(3 * w.TTL)
			ok := run.WaitHolds(from+warm, progressTimeout)
			proxy.Restore(t)
			if !ok {
				t.Errorf("only %d holds in %v through the two replicas still connected to Redis", run.Holds()-from, progressTimeout)
			}
			return nil
		},
	}.run(t)
	expectClean(t, res)
}
