package telemetry

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// InstrumentRedis measures rdb's connection pools (db_client_connections_*,
// one pool_name per node) and, when traces are exported, adds redisotel's
// span per command.
//
// Pool metrics are read from go-redis's own pool counters when /metrics is
// scraped, so commands pay nothing for them; redisotel's metrics hook would
// build an attribute set and record a histogram on every command, a cost
// the lock path's benchmarks showed.
//
// Redis spans are only started inside a span, such as an RPC's: background
// work (lease renewals, health pings) would otherwise flood the collector
// with root traces. Spans carry no db.statement, since command arguments
// include lease owners and access tokens, and no caller file and line,
// which cost a stack walk per command.
//
// Call it before rdb is first used: a Cluster client's hook reaches only the
// nodes it connects to afterwards.
func (t *Telemetry) InstrumentRedis(rdb redis.UniversalClient) error {
	if t.sdkTP != nil {
		err := redisotel.InstrumentTracing(rdb,
			redisotel.WithTracerProvider(childOnlyTracerProvider{tp: t.tp}),
			redisotel.WithDBStatement(false),
			redisotel.WithCallerEnabled(false),
			redisotel.WithDialFilter(true),
		)
		if err != nil {
			return fmt.Errorf("telemetry: redis tracing: %w", err)
		}
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(t.redisNodeInstrumenter())
	case *redis.Client:
		t.pools.add(c.Options().Addr, c)
	default:
		return fmt.Errorf("telemetry: redis metrics: unsupported client %T", rdb)
	}
	return nil
}

// redisNodeInstrumenter returns the function that measures each new node of
// one Cluster client, named by its address. A node that replaces an earlier
// one of the same address (after a topology change) takes over its series.
func (t *Telemetry) redisNodeInstrumenter() func(node *redis.Client) {
	return func(node *redis.Client) {
		t.pools.add(node.Options().Addr, node)
	}
}

// pools are the Redis connection pools /metrics reports, by pool name.
type pools struct {
	mu     sync.Mutex
	byName map[string]*redis.Client
}

func (p *pools) add(name string, c *redis.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byName == nil {
		p.byName = map[string]*redis.Client{}
	}
	p.byName[name] = c
}

// registerPoolMetrics reports every pool's state from its counters at
// collection time, with redisotel's semantic-convention names.
func (t *Telemetry) registerPoolMetrics(meter metric.Meter) error {
	max, err := meter.Int64ObservableGauge("db.client.connections.max",
		metric.WithDescription("The maximum number of open connections allowed."), metric.WithUnit("{connection}"))
	if err != nil {
		return err
	}
	usage, err := meter.Int64ObservableGauge("db.client.connections.usage",
		metric.WithDescription("The number of connections in each state."), metric.WithUnit("{connection}"))
	if err != nil {
		return err
	}
	timeouts, err := meter.Int64ObservableCounter("db.client.connections.timeouts",
		metric.WithDescription("Times a command waited for a free connection in vain."), metric.WithUnit("{timeout}"))
	if err != nil {
		return err
	}
	hits, err := meter.Int64ObservableCounter("db.client.connections.hits",
		metric.WithDescription("Times a free connection was found in the pool."), metric.WithUnit("{hit}"))
	if err != nil {
		return err
	}
	misses, err := meter.Int64ObservableCounter("db.client.connections.misses",
		metric.WithDescription("Times no free connection was in the pool."), metric.WithUnit("{miss}"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.pools.mu.Lock()
		defer t.pools.mu.Unlock()
		for name, c := range t.pools.byName {
			st := c.PoolStats()
			pool := attribute.NewSet(attribute.String("db.system", "redis"), attribute.String("pool.name", name))
			with := metric.WithAttributeSet(pool)
			o.ObserveInt64(max, int64(c.Options().PoolSize), with)
			o.ObserveInt64(usage, int64(st.IdleConns), metric.WithAttributeSet(attribute.NewSet(
				attribute.String("db.system", "redis"), attribute.String("pool.name", name), attribute.String("state", "idle"))))
			o.ObserveInt64(usage, int64(st.TotalConns)-int64(st.IdleConns), metric.WithAttributeSet(attribute.NewSet(
				attribute.String("db.system", "redis"), attribute.String("pool.name", name), attribute.String("state", "used"))))
			o.ObserveInt64(timeouts, int64(st.Timeouts), with)
			o.ObserveInt64(hits, int64(st.Hits), with)
			o.ObserveInt64(misses, int64(st.Misses), with)
		}
		return nil
	}, max, usage, timeouts, hits, misses)
	return err
}

// childOnlyTracerProvider hands out tracers that start a span only when the
// context already holds a valid span context, local or remote.
type childOnlyTracerProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

// Tracer wraps tp's tracer.
func (p childOnlyTracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{tracer: p.tp.Tracer(name, opts...)}
}

// childOnlyTracer is the tracer of a childOnlyTracerProvider.
type childOnlyTracer struct {
	embedded.Tracer
	tracer trace.Tracer
}

// Start starts a span below the one in ctx, or returns ctx's non-recording
// span when there is none.
func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, name, opts...)
}
