package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
)

// redisMemoryMetrics are lockd_redis_used_memory_bytes and
// lockd_redis_maxmemory_bytes: Redis's memory as last read (the fullest
// master's, on a Cluster), so that an alert can fire before grants fail.
type redisMemoryMetrics struct {
	used, max atomic.Int64 // -1: not read
}

func newRedisMemoryMetrics(meter metric.Meter) (*redisMemoryMetrics, error) {
	m := &redisMemoryMetrics{}
	m.used.Store(-1)
	m.max.Store(-1)
	for _, g := range []struct {
		name, desc string
		v          *atomic.Int64
	}{
		{"lockd.redis.used_memory", "Redis's used_memory as lockd last read it (the fullest master's on a Cluster).", &m.used},
		{"lockd.redis.maxmemory", "Redis's maxmemory as lockd last read it (0: no limit).", &m.max},
	} {
		v := g.v
		if _, err := meter.Int64ObservableGauge(g.name, metric.WithDescription(g.desc), metric.WithUnit("By"),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				if n := v.Load(); n >= 0 {
					o.Observe(n)
				}
				return nil
			})); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// RedisMemory records Redis's used_memory and maxmemory, in bytes.
func (m *SecurityMetrics) RedisMemory(used, max int64) {
	if m == nil || m.redis == nil {
		return
	}
	m.redis.used.Store(used)
	m.redis.max.Store(max)
}
