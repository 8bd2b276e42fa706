package telemetry

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// poolMax returns db_client_connections_max for pool, and whether it is
// served.
func poolMax(t *testing.T, tel *Telemetry, pool string) (float64, bool) {
	t.Helper()
	fam, ok := scrape(t, tel.MetricsHandler())["db_client_connections_max"]
	if !ok {
		return 0, false
	}
	m := find(fam, map[string]string{"db_system": "redis", "pool_name": pool})
	if m == nil {
		return 0, false
	}
	return m.GetGauge().GetValue(), true
}

// TestRedisPoolMetrics shows a client's pool on /metrics, read from its
// counters: no per-command histogram.
func TestRedisPoolMetrics(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{})
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := tel.InstrumentRedis(rdb); err != nil {
		t.Fatalf("InstrumentRedis: %v", err)
	}
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if v, ok := poolMax(t, tel, srv.Addr()); !ok || v != float64(rdb.Options().PoolSize) {
		t.Errorf("db_client_connections_max{pool_name=%q} = %v, %v; want %d", srv.Addr(), v, ok, rdb.Options().PoolSize)
	}
	fams := scrape(t, tel.MetricsHandler())
	used := find(fams["db_client_connections_usage"], map[string]string{"db_system": "redis", "pool_name": srv.Addr(), "state": "idle"})
	if used == nil || used.GetGauge().GetValue() < 1 {
		t.Errorf("db_client_connections_usage{state=idle} = %v, want the pinged connection", used)
	}
	if hits := find(fams["db_client_connections_hits_total"], map[string]string{"db_system": "redis", "pool_name": srv.Addr()}); hits == nil {
		t.Error("no db_client_connections_hits_total")
	}
	if _, ok := fams["db_client_connections_use_time_milliseconds"]; ok {
		t.Error("a per-command histogram is recorded")
	}
}

// TestRedisClusterNodesHaveTheirOwnPools shows each node of a Cluster
// client measured under its own address. The cluster is two plain servers
// given slots by hand, which go-redis supports through ClusterSlots.
func TestRedisClusterNodesHaveTheirOwnPools(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{})
	a, b := redistest.Start(t), redistest.Start(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		PoolSize: 3,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{
				{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: a.Addr()}}},
				{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: b.Addr()}}},
			}, nil
		},
	})
	t.Cleanup(func() { _ = cc.Close() })
	if err := tel.InstrumentRedis(cc); err != nil {
		t.Fatalf("InstrumentRedis: %v", err)
	}
	if err := cc.ForEachShard(t.Context(), func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	// go-redis names nodes given by ClusterSlots ":port", without a host.
	pools := map[string]float64{}
	for _, m := range scrape(t, tel.MetricsHandler())["db_client_connections_max"].GetMetric() {
		pools[labels(m)["pool_name"]] = m.GetGauge().GetValue()
	}
	for _, s := range []*redistest.Server{a, b} {
		if v, ok := pools[":"+strconv.Itoa(s.Port())]; !ok || v != 3 {
			t.Errorf("no pool of 3 for node %s; pools %v", s.Addr(), pools)
		}
	}
	if len(pools) != 2 {
		t.Errorf("pools %v, want one per node", pools)
	}
}

// TestRedisReplacedNodeTakesOverItsSeries shows that a Cluster node created
// again for the same address replaces the earlier node's pool series
// instead of adding to it.
func TestRedisReplacedNodeTakesOverItsSeries(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{})
	addr := redistest.Start(t).Addr()
	instrument := tel.redisNodeInstrumenter()
	for _, size := range []int{5, 7} {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: size})
		t.Cleanup(func() { _ = c.Close() })
		instrument(c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, ok := poolMax(t, tel, addr)
		if ok && v == 7 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("db_client_connections_max{pool_name=%q} = %v, %v; want the new node's 7 alone", addr, v, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
