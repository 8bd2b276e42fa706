package telemetry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// connectionMetrics are lockd_connections_refused_total{listener,reason}
// and lockd_connections{listener,state}, the connections of each listener
// pending (not admitted yet) and admitted.
type connectionMetrics struct {
	refused metric.Int64Counter

	mu     sync.Mutex
	counts map[string]func() (pending, admitted int)
}

func newConnectionMetrics(meter metric.Meter) (*connectionMetrics, error) {
	m := &connectionMetrics{counts: map[string]func() (int, int){}}
	var err error
	if m.refused, err = meter.Int64Counter("lockd.connections.refused",
		metric.WithDescription("Connections closed or refused by a listener's bounds, by listener and reason: evicted (a pending connection gave way to a newer one), pending_timeout (not admitted in time), full (every place taken), client_share (its client has its share)."),
		metric.WithUnit("{connection}")); err != nil {
		return nil, err
	}
	_, err = meter.Int64ObservableGauge("lockd.connections",
		metric.WithDescription("Connections open on each listener, by state: pending (no call let in yet) or admitted."),
		metric.WithUnit("{connection}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for name, f := range m.counts {
				pending, admitted := f()
				o.Observe(int64(pending), metric.WithAttributes(attribute.String("listener", name), attribute.String("state", "pending")))
				o.Observe(int64(admitted), metric.WithAttributes(attribute.String("listener", name), attribute.String("state", "admitted")))
			}
			return nil
		}))
	return m, err
}

// ConnectionRefused counts a connection that listener closed or refused
// for reason.
func (m *SecurityMetrics) ConnectionRefused(listener, reason string) {
	if m == nil || m.conns == nil {
		return
	}
	m.conns.refused.Add(context.Background(), 1, metric.WithAttributes(attribute.String("listener", listener), attribute.String("reason", reason)))
}

// RegisterConnections sets the function the connections gauge reads for
// listener at every scrape; it must be fast and safe for concurrent use.
func (m *SecurityMetrics) RegisterConnections(listener string, f func() (pending, admitted int)) {
	if m == nil || m.conns == nil {
		return
	}
	m.conns.mu.Lock()
	m.conns.counts[listener] = f
	m.conns.mu.Unlock()
}
