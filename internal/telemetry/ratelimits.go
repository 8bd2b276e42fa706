package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockd/lockd/internal/ratelimit"
)

// RateLimitMetrics records the rate limiter's decisions as
// lockd_ratelimit_decisions_total{allowed} and, for calls that waited for
// their turn, lockd_ratelimit_wait_seconds. It implements
// [ratelimit.Observer] without allocating. A nil *RateLimitMetrics records
// nothing.
type RateLimitMetrics struct {
	decisions metric.Int64Counter
	wait      metric.Float64Histogram

	allowedOpts, refusedOpts []metric.AddOption
}

var _ ratelimit.Observer = (*RateLimitMetrics)(nil)

// newRateLimitMetrics creates the rate limit instruments on meter.
func newRateLimitMetrics(meter metric.Meter) (*RateLimitMetrics, error) {
	m := &RateLimitMetrics{}
	var err error
	if m.decisions, err = meter.Int64Counter("lockd.ratelimit.decisions",
		metric.WithDescription("Rate limit decisions (RateLimitService.Take), by whether the cost was allowed."),
		metric.WithUnit("{decision}")); err != nil {
		return nil, err
	}
	if m.wait, err = meter.Float64Histogram("lockd.ratelimit.wait",
		metric.WithDescription("Time allowed calls waited for their turn."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, err
	}
	m.allowedOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.Bool("allowed", true)))}
	m.refusedOpts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.Bool("allowed", false)))}
	// Both series from the start, at 0: a ratio of refusals must not wait
	// for the first one.
	m.decisions.Add(context.Background(), 0, m.allowedOpts...)
	m.decisions.Add(context.Background(), 0, m.refusedOpts...)
	return m, nil
}

// Decided counts a decision and records the wait of a call that waited
// for its turn.
func (m *RateLimitMetrics) Decided(allowed bool, waited time.Duration) {
	if m == nil {
		return
	}
	ctx := context.Background()
	if !allowed {
		m.decisions.Add(ctx, 1, m.refusedOpts...)
		return
	}
	m.decisions.Add(ctx, 1, m.allowedOpts...)
	if waited > 0 {
		m.wait.Record(ctx, waited.Seconds())
	}
}
