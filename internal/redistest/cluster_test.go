//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClusterSpreadsKeysOverAllMasters(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	cc := c.ClusterClient(t)
	ctx := context.Background()

	const n = 300
	for i := range n {
		if err := cc.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	for i := range n {
		if got, err := cc.Get(ctx, fmt.Sprintf("key-%d", i)).Int(); err != nil || got != i {
			t.Fatalf("GET key-%d = %d, %v; want %d", i, got, err, i)
		}
	}

	total := 0
	sizes := map[string]int{}
	for _, node := range c.Nodes() {
		size, err := node.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", node.Addr(), err)
		}
		if size == 0 {
			t.Errorf("node %s holds no keys", node.Addr())
		}
		total += int(size)
		sizes[node.Addr()] = int(size)
	}
	if total != n {
		t.Errorf("nodes hold %d keys in all, want %d", total, n)
	}

	// A restarted node keeps its slots and loses its keys.
	node := c.Nodes()[0]
	node.Restart(t)
	c.WaitHealthy(t)
	if size, err := node.Client(t).DBSize(ctx).Result(); err != nil || size != 0 {
		t.Fatalf("DBSIZE of the restarted node = %d, %v; want 0", size, err)
	}
	lost := 0
	for i := range n {
		err := cc.Get(ctx, fmt.Sprintf("key-%d", i)).Err()
		switch {
		case errors.Is(err, redis.Nil):
			lost++
		case err != nil:
			t.Fatalf("GET key-%d after the restart: %v", i, err)
		}
	}
	if lost != sizes[node.Addr()] {
		t.Errorf("%d keys lost, want the %d the restarted node held", lost, sizes[node.Addr()])
	}

	// A script over keys that share a hash tag runs on the slot's owner.
	script := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])`)
	for i := range 20 {
		keys := []string{fmt.Sprintf("lockd:{k%d}:a", i), fmt.Sprintf("lockd:{k%d}:b", i)}
		if got, err := script.Run(ctx, cc, keys, "x").Int(); err != nil || got != 1 {
			t.Fatalf("script on %v = %d, %v; want 1", keys, got, err)
		}
	}
}
