package telemetry

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestRateLimitDecisions reads lockd_ratelimit_decisions_total{allowed} and
// lockd_ratelimit_wait_seconds back from the metrics handler: both
// decision series exist from the start, and only allowed calls that
// waited are observed in the wait histogram.
func TestRateLimitDecisions(t *testing.T) {
	t.Parallel()
	tel := setup(t, Options{})
	fams := scrape(t, tel.MetricsHandler())
	for _, allowed := range []string{"true", "false"} {
		if m := find(fams["lockd_ratelimit_decisions_total"], map[string]string{"allowed": allowed}); m == nil || m.GetCounter().GetValue() != 0 {
			t.Errorf("before any decision, allowed=%s: %v, want a series at 0", allowed, m)
		}
	}

	rl := tel.RateLimits()
	rl.Decided(true, 0)
	rl.Decided(true, 250*time.Millisecond)
	rl.Decided(false, 0)
	rl.Decided(false, 0)
	rl.Decided(false, 0)
	fams = scrape(t, tel.MetricsHandler())
	fam := fams["lockd_ratelimit_decisions_total"]
	if fam.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("decisions are a %v", fam.GetType())
	}
	for allowed, want := range map[string]float64{"true": 2, "false": 3} {
		if got := find(fam, map[string]string{"allowed": allowed}).GetCounter().GetValue(); got != want {
			t.Errorf("allowed=%s: %v, want %v", allowed, got, want)
		}
	}
	wait := find(fams["lockd_ratelimit_wait_seconds"], map[string]string{})
	if h := wait.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.25 {
		t.Errorf("wait histogram: %d samples summing %v, want the one wait of 0.25s", h.GetSampleCount(), h.GetSampleSum())
	}

	var none *RateLimitMetrics
	none.Decided(true, time.Second) // records nothing, and does not panic
}

func TestRateLimitMetricsDoNotAllocate(t *testing.T) {
	rl := setup(t, Options{}).RateLimits()
	if n := testing.AllocsPerRun(100, func() {
		rl.Decided(true, 0)
		rl.Decided(false, 0)
		rl.Decided(true, time.Millisecond)
	}); n > 0 {
		t.Errorf("%v allocations per decision", n)
	}
}
