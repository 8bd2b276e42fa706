//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds cluster creation and convergence.
const clusterTimeout = 90 * time.Second

// Cluster is a Redis Cluster of masters without replicas, started by
// [StartCluster].
type Cluster struct {
	nodes []*Server
}

// StartCluster starts masters (at least 3) cluster-enabled redis-servers,
// joins them with `redis-cli --cluster create` so that the 16384 slots are
// spread over them, and waits until every node reports cluster_state:ok with
// all slots covered. The cluster-node-timeout is 5s: a node frozen for longer
// is marked failed and the cluster stops serving until it is back. All nodes
// are killed when the test ends.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	cli := binary(tb, "redis-cli")
	c := &Cluster{}
	for range masters {
		s := Start(tb, func(o *options) { o.cluster = true })
		c.nodes = append(c.nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, out, c.logTails())
	}
	c.WaitHealthy(tb)
	return c
}

// Addrs returns the nodes' addresses, "127.0.0.1:port" each.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the cluster's servers, to stop, kill or freeze one.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// ClusterClient returns a go-redis cluster client seeded with all nodes,
// closed when the test ends. It honours context deadlines.
func (c *Cluster) ClusterClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitHealthy waits until every node reports cluster_state:ok, all 16384
// slots covered and all nodes known, for example after a node's
// [Server.Restart] (a restarted node keeps its slots but loses its keys).
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for _, n := range c.nodes {
		var last error
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			last = c.checkNode(ctx, n.Addr())
			cancel()
			if last == nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster not healthy within %v: %v%s", clusterTimeout, last, c.logTails())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (c *Cluster) checkNode(ctx context.Context, addr string) error {
	v, err := command(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
	}
	info, _ := v.(string)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_size":           strconv.Itoa(len(c.nodes)),
	}
	var bad []string
	for k, w := range want {
		if got := infoField(info, k); got != w {
			bad = append(bad, fmt.Sprintf("%s=%q (want %q)", k, got, w))
		}
	}
	if len(bad) > 0 {
		return errors.New(addr + ": " + strings.Join(bad, ", "))
	}
	return nil
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n--- %s log tail ---\n%s", n.Addr(), n.LogTail())
	}
	return b.String()
}
