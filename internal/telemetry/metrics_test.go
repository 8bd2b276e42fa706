package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lockd/lockd/internal/redislock"
)

// TestMetricsExposition records lock and token events and a real RPC, then
// reads the promised series back from the metrics handler, with exactly
// their promised labels.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{ServiceName: "lockd-test"})
	srv := serve(t, tel, func(context.Context) error { return nil })
	srv.ping(t, t.Context())
	srv.checkHealth(t, t.Context())
	srv.stop()

	locks, tokens := tel.Locks(), tel.Tokens()
	locks.Granted(redislock.Read, 300*time.Microsecond)
	locks.Granted(redislock.Write, 2*time.Millisecond)
	locks.Granted(redislock.Write, 40*time.Second)
	locks.Granted(redislock.Mode(9), time.Millisecond)
	locks.Waited(redislock.Read, 5*time.Second)
	locks.Released(redislock.Read, 3*time.Second)
	locks.Lost()
	locks.DataLoss()
	locks.DataLoss()
	tel.RegisterKeepAliveStreams(func() int64 { return 7 })
	tel.RegisterServing(func() bool { return true })
	tokens.TokenMinted("wxapp")
	tokens.TokenUpstreamError("wxapp", "40001")
	tokens.TokenTransportError("wxapp")
	tokens.TokenTransportError("wxapp")
	tokens.TokenUpstreamError("oauth", "invalid_client")
	tokens.TokenFetched("wxapp", "access_token", "same")
	tokens.TokenFetched("wxapp", "access_token", "same")
	tokens.TokenFetched("wxapp", "jsapi", "new")
	tokens.TokenPossiblyMinted("wxapp")
	tokens.TokenState("wxapp", time.Now().Add(time.Hour), 3, 0, false)
	tokens.TokenState("wxapp", time.Now().Add(time.Hour), -1, 2, true) // Redis away: mints unknown
	tokens.TokenState("idle", time.Time{}, 0, 0, false)
	sec := tel.Security()
	sec.AuthRefused("unknown_token")
	sec.AuthRefused("unknown_token")
	sec.TLSHandshakeFailed("client_certificate")
	sec.TLSReloadFailed("client_ca")
	sec.ConfigReloaded(true)
	sec.ConfigReloaded(false)
	sec.RegisterCertificateExpiry(func() (time.Time, bool) { return time.Unix(1900000000, 0), true })

	fams := scrape(t, tel.MetricsHandler())

	tests := []struct {
		name   string
		family string
		typ    dto.MetricType
		labels map[string]string
		value  float64 // a counter's or gauge's value, a histogram's count
	}{
		{"a read grant is counted under mode read", "lockd_lock_grants_total", dto.MetricType_COUNTER, map[string]string{"mode": "read"}, 1},
		{"write grants are counted apart from reads", "lockd_lock_grants_total", dto.MetricType_COUNTER, map[string]string{"mode": "write"}, 2},
		{"a mode the package does not know is labelled unknown", "lockd_lock_grants_total", dto.MetricType_COUNTER, map[string]string{"mode": "unknown"}, 1},
		{"a grant observes its wait with outcome granted", "lockd_lock_wait_seconds", dto.MetricType_HISTOGRAM, map[string]string{"mode": "write", "outcome": "granted"}, 2},
		{"a wait ending without the lock is observed with outcome timeout", "lockd_lock_wait_seconds", dto.MetricType_HISTOGRAM, map[string]string{"mode": "read", "outcome": "timeout"}, 1},
		{"a release observes the hold time by mode", "lockd_lock_hold_seconds", dto.MetricType_HISTOGRAM, map[string]string{"mode": "read"}, 1},
		{"a lost lease is counted without labels", "lockd_lock_lost_total", dto.MetricType_COUNTER, map[string]string{}, 1},
		{"the keepalive gauge reads the registered function", "lockd_keepalive_streams", dto.MetricType_GAUGE, map[string]string{}, 7},
		{"data losses are counted without labels", "lockd_lock_data_loss_total", dto.MetricType_COUNTER, map[string]string{}, 2},
		{"a serving replica reports 1", "lockd_serving", dto.MetricType_GAUGE, map[string]string{}, 1},
		{"a mint is counted per app", "lockd_token_mints_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp"}, 1},
		{"an upstream errcode is labelled in decimal", "lockd_token_upstream_errors_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp", "errcode": "40001"}, 1},
		{"a transport failure is labelled errcode transport", "lockd_token_upstream_errors_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp", "errcode": "transport"}, 2},
		{"a textual error code is its own label", "lockd_token_upstream_errors_total", dto.MetricType_COUNTER, map[string]string{"app": "oauth", "errcode": "invalid_client"}, 1},
		{"fetches are counted by value and outcome", "lockd_token_fetches_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp", "value": "access_token", "outcome": "same"}, 2},
		{"a ticket's fetches are counted apart", "lockd_token_fetches_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp", "value": "jsapi", "outcome": "new"}, 1},
		{"a fetch left unanswered is a possible mint", "lockd_token_possible_mints_total", dto.MetricType_COUNTER, map[string]string{"app": "wxapp"}, 1},
		{"the fleet's mints today are the last known", "lockd_token_mints_today", dto.MetricType_GAUGE, map[string]string{"app": "wxapp"}, 3},
		{"failures in a row are the last reported", "lockd_token_refresh_failures", dto.MetricType_GAUGE, map[string]string{"app": "wxapp"}, 2},
		{"serving from memory is 1", "lockd_token_from_memory", dto.MetricType_GAUGE, map[string]string{"app": "wxapp"}, 1},
		{"an app without a token has no life left", "lockd_token_remaining_seconds", dto.MetricType_GAUGE, map[string]string{"app": "idle"}, 0},
		{"auth failures are counted by reason", "lockd_auth_failures_total", dto.MetricType_COUNTER, map[string]string{"reason": "unknown_token"}, 2},
		{"TLS handshake failures are counted by reason", "lockd_tls_handshake_failures_total", dto.MetricType_COUNTER, map[string]string{"reason": "client_certificate"}, 1},
		{"TLS reload failures are counted by file", "lockd_tls_reload_failures_total", dto.MetricType_COUNTER, map[string]string{"file": "client_ca"}, 1},
		{"config reloads are counted by result", "lockd_config_reloads_total", dto.MetricType_COUNTER, map[string]string{"result": "refused"}, 1},
		{"the certificate's expiry is a timestamp", "lockd_tls_certificate_expiry_timestamp_seconds", dto.MetricType_GAUGE, map[string]string{}, 1900000000},
		{"the RPC is measured by otelgrpc", "rpc_server_call_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"rpc_method": "lockd.telemetrytest.Pinger/Ping", "rpc_response_status_code": "OK", "rpc_system_name": "grpc"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fam, ok := fams[tc.family]
			if !ok {
				t.Fatalf("no family %s", tc.family)
			}
			if fam.GetType() != tc.typ {
				t.Fatalf("%s is a %v, want %v", tc.family, fam.GetType(), tc.typ)
			}
			m := find(fam, tc.labels)
			if m == nil {
				var got []map[string]string
				for _, m := range fam.GetMetric() {
					got = append(got, labels(m))
				}
				t.Fatalf("%s has no series labelled exactly %v; it has %v", tc.family, tc.labels, got)
			}
			var v float64
			switch tc.typ {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			if v != tc.value {
				t.Errorf("%s%v = %v, want %v", tc.family, tc.labels, v, tc.value)
			}
		})
	}

	t.Run("health checks leave no rpc_server series", func(t *testing.T) {
		t.Parallel()
		for name, fam := range fams {
			if !strings.HasPrefix(name, "rpc_server_") {
				continue
			}
			for _, m := range fam.GetMetric() {
				if strings.HasPrefix(labels(m)["rpc_method"], "grpc.health.v1.") {
					t.Errorf("%s has a health check series: %v", name, labels(m))
				}
			}
		}
	})
	t.Run("the token's life left is counted at the scrape", func(t *testing.T) {
		t.Parallel()
		m := find(fams["lockd_token_remaining_seconds"], map[string]string{"app": "wxapp"})
		if v := m.GetGauge().GetValue(); v < 3500 || v > 3600 {
			t.Errorf("lockd_token_remaining_seconds = %v, want about an hour", v)
		}
	})
	t.Run("the wait histogram spans sub-millisecond to minutes", func(t *testing.T) {
		t.Parallel()
		m := find(fams["lockd_lock_wait_seconds"], map[string]string{"mode": "write", "outcome": "granted"})
		b := m.GetHistogram().GetBucket()
		if lo, hi := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); lo > 0.001 || hi < 60 {
			t.Errorf("buckets from %v to %v, want from at most 1ms to at least 60s", lo, hi)
		}
	})
	t.Run("runtime and process collectors are served beside", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"go_goroutines", "target_info"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("no family %s", name)
			}
		}
	})
}

// TestKeepAliveGaugeFollowsRegistration shows the gauge absent before a
// function is registered, replaced by a later one, and gone after nil.
func TestKeepAliveGaugeFollowsRegistration(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{})
	gauge := func() (float64, bool) {
		fam, ok := scrape(t, tel.MetricsHandler())["lockd_keepalive_streams"]
		if !ok || len(fam.GetMetric()) == 0 {
			return 0, false
		}
		return fam.GetMetric()[0].GetGauge().GetValue(), true
	}
	if v, ok := gauge(); ok {
		t.Fatalf("gauge = %v before any registration, want no series", v)
	}
	tel.RegisterKeepAliveStreams(func() int64 { return 1 })
	tel.RegisterKeepAliveStreams(func() int64 { return 10000 })
	if v, ok := gauge(); !ok || v != 10000 {
		t.Fatalf("gauge = %v, %v; want the later function's 10000", v, ok)
	}
	tel.RegisterKeepAliveStreams(nil)
	if v, ok := gauge(); ok {
		t.Fatalf("gauge = %v after nil, want no series", v)
	}
}

// TestSeveralInOneProcess shows that each Telemetry has a registry of its
// own: two in one process neither collide nor see each other's series.
func TestSeveralInOneProcess(t *testing.T) {
	t.Parallel()
	a, b := setup(t, Options{}), setup(t, Options{})
	a.Locks().Lost()
	lost := func(tel *Telemetry) float64 {
		fam := scrape(t, tel.MetricsHandler())["lockd_lock_lost_total"]
		if fam == nil || len(fam.GetMetric()) != 1 {
			t.Fatalf("lockd_lock_lost_total = %v, want one series (exported from the start)", fam)
		}
		return fam.GetMetric()[0].GetCounter().GetValue()
	}
	if v := lost(b); v != 0 {
		t.Errorf("b serves %v lost leases, want its own 0", v)
	}
	if v := lost(a); v != 1 {
		t.Errorf("a serves %v lost leases, want 1", v)
	}
}

// TestNilMetricsRecordNothing shows that nil metrics are safe to call, for
// callers built without telemetry.
func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var locks *LockMetrics
	locks.Granted(redislock.Write, time.Second)
	locks.Waited(redislock.Write, time.Second)
	locks.Released(redislock.Write, time.Second)
	locks.Lost()
	var tokens *TokenMetrics
	tokens.TokenMinted("app")
	tokens.TokenUpstreamError("app", "40001")
	tokens.TokenTransportError("app")
}

// TestLockMetricsDoNotAllocate holds the observer's hot path to zero
// allocations per event. Not parallel: AllocsPerRun counts the whole
// process's allocations and refuses to run in a parallel test.
func TestLockMetricsDoNotAllocate(t *testing.T) {
	m := setup(t, Options{}).Locks()
	events := func() {
		m.Granted(redislock.Write, time.Millisecond)
		m.Waited(redislock.Read, time.Second)
		m.Released(redislock.Write, time.Second)
		m.Lost()
	}
	events() // the first event of each series builds its aggregation
	if n := testing.AllocsPerRun(100, events); n != 0 {
		t.Errorf("%v allocations per round of lock events, want 0", n)
	}
}

func BenchmarkLockMetricsGranted(b *testing.B) {
	tel, err := Setup(b.Context(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	m := tel.Locks()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Granted(redislock.Write, time.Millisecond)
		}
	})
}

// TestServingGaugeFollowsTheRegisteredFunction reads lockd_serving at each
// scrape: absent before a function is registered, then 1 or 0 as it says.
func TestServingGaugeFollowsTheRegisteredFunction(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{ServiceName: "lockd-test"})
	if _, ok := scrape(t, tel.MetricsHandler())["lockd_serving"]; ok {
		t.Fatal("lockd_serving exported before anything reports the health")
	}
	serving := true
	tel.RegisterServing(func() bool { return serving })
	for _, want := range []float64{1, 0, 1} {
		serving = want == 1
		m := find(scrape(t, tel.MetricsHandler())["lockd_serving"], map[string]string{})
		if got := m.GetGauge().GetValue(); got != want {
			t.Errorf("lockd_serving = %v while serving is %v", got, serving)
		}
	}
}
