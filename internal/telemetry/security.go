package telemetry

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// SecurityMetrics records what operators watch to see lockd under attack or
// misconfigured: lockd_auth_failures_total{reason},
// lockd_tls_handshake_failures_total{reason},
// lockd_tls_reload_failures_total{file} and
// lockd_config_reloads_total{result}; with
// lockd_tls_certificate_expiry_timestamp_seconds, read from the function
// given to RegisterCertificateExpiry. A nil *SecurityMetrics records
// nothing.
type SecurityMetrics struct {
	auth      metric.Int64Counter
	handshake metric.Int64Counter
	reload    metric.Int64Counter
	config    metric.Int64Counter
	expiry    atomic.Pointer[func() (time.Time, bool)]
	conns     *connectionMetrics
	redis     *redisMemoryMetrics
}

func newSecurityMetrics(meter metric.Meter) (*SecurityMetrics, error) {
	m := &SecurityMetrics{}
	var err error
	if m.conns, err = newConnectionMetrics(meter); err != nil {
		return nil, err
	}
	if m.redis, err = newRedisMemoryMetrics(meter); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		counter           *metric.Int64Counter
		name, desc, units string
	}{
		{&m.auth, "lockd.auth.failures", "Calls refused by authentication or authorization, by reason.", "{call}"},
		{&m.handshake, "lockd.tls.handshake_failures", "TLS handshakes that failed, by reason (client_certificate: a client certificate missing or not trusted).", "{handshake}"},
		{&m.reload, "lockd.tls.reload_failures", "Changed TLS files that could not be loaded; the last good ones stay in use.", "{reload}"},
		{&m.config, "lockd.config.reloads", "Configuration reloads (SIGHUP), by result: applied or refused.", "{reload}"},
	} {
		var err error
		if *c.counter, err = meter.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.units)); err != nil {
			return nil, err
		}
	}
	_, err = meter.Float64ObservableGauge("lockd.tls.certificate.expiry_timestamp",
		metric.WithDescription("When the served TLS certificate expires, in seconds since the Unix epoch."),
		metric.WithUnit("s"),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			if f := m.expiry.Load(); f != nil {
				if t, ok := (*f)(); ok {
					o.Observe(float64(t.UnixNano()) / 1e9)
				}
			}
			return nil
		}))
	return m, err
}

func (m *SecurityMetrics) add(c metric.Int64Counter, key, value string) {
	if m == nil {
		return
	}
	c.Add(context.Background(), 1, metric.WithAttributes(attribute.String(key, value)))
}

// AuthRefused counts a call refused for reason.
func (m *SecurityMetrics) AuthRefused(reason string) {
	if m != nil {
		m.add(m.auth, "reason", reason)
	}
}

// TLSHandshakeFailed counts a failed TLS handshake.
func (m *SecurityMetrics) TLSHandshakeFailed(reason string) {
	if m != nil {
		m.add(m.handshake, "reason", reason)
	}
}

// TLSReloadFailed counts a changed TLS file (cert, key or client_ca) that
// could not be loaded.
func (m *SecurityMetrics) TLSReloadFailed(file string) {
	if m != nil {
		m.add(m.reload, "file", file)
	}
}

// ConfigReloaded counts a configuration reload, applied or refused.
func (m *SecurityMetrics) ConfigReloaded(applied bool) {
	if m == nil {
		return
	}
	result := "refused"
	if applied {
		result = "applied"
	}
	m.add(m.config, "result", result)
}

// RegisterCertificateExpiry sets the function the certificate expiry gauge
// reads at every scrape (false: no certificate, no series); it must be
// fast and safe for concurrent use.
func (m *SecurityMetrics) RegisterCertificateExpiry(f func() (time.Time, bool)) {
	if m != nil {
		m.expiry.Store(&f)
	}
}
