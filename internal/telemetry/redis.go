package telemetry

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// InstrumentRedis adds redisotel's hooks to rdb: connection-pool metrics
// (db_client_connections_*, one pool.name per node) always, and a span per
// command when traces are exported.
//
// Redis spans are only started inside a span, such as an RPC's: background
// work (lease renewals, health pings) would otherwise flood the collector
// with root traces. Spans carry no db.statement, since command arguments
// include lease owners and access tokens, and no caller file and line,
// which cost a stack walk per command.
//
// Call it before rdb is first used: a Cluster client's hooks reach only the
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
	default:
		if err := redisotel.InstrumentMetrics(rdb, t.redisMetricsOptions()...); err != nil {
			return fmt.Errorf("telemetry: redis metrics: %w", err)
		}
	}
	return nil
}

// redisNodeInstrumenter returns the function that adds pool metrics to each
// new node of one Cluster client, named by its address: redisotel would name
// every node after the first seed, so their series would add up. A node that
// replaces an earlier one of the same address (after a topology change)
// takes over its series; the earlier one's callback is unregistered rather
// than reporting a closed pool beside it.
func (t *Telemetry) redisNodeInstrumenter() func(node *redis.Client) {
	var mu sync.Mutex
	unregister := make(map[string]chan struct{})
	return func(node *redis.Client) {
		addr := node.Options().Addr
		done := make(chan struct{})
		mu.Lock()
		if prev, ok := unregister[addr]; ok {
			close(prev)
		}
		unregister[addr] = done
		mu.Unlock()
		opts := append(t.redisMetricsOptions(), redisotel.WithPoolName(addr), redisotel.WithCloseChan(done))
		if err := redisotel.InstrumentMetrics(node, opts...); err != nil {
			t.logger.Warn("redis node metrics", "addr", addr, "err", err)
		}
	}
}

// redisMetricsOptions are the redisotel options every pool is measured with.
func (t *Telemetry) redisMetricsOptions() []redisotel.MetricsOption {
	return []redisotel.MetricsOption{
		redisotel.WithMeterProvider(t.mp),
		redisotel.WithSemConvCompliantMetrics(true),
	}
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
