package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// tokenStates holds the last state the token broker reported for each app,
// read at every scrape by the gauges lockd_token_remaining_seconds{app},
// lockd_token_mints_today{app}, lockd_token_refresh_failures{app} and
// lockd_token_from_memory{app}.
type tokenStates struct {
	mu    sync.Mutex
	byApp map[string]*tokenState
	attrs map[string]metric.ObserveOption
}

type tokenState struct {
	expire     time.Time
	mintsToday int64
	failures   int64
	fromMemory bool
}

// register creates the gauges on meter.
func (s *tokenStates) register(meter metric.Meter) error {
	remaining, err := meter.Float64ObservableGauge("lockd.token.remaining",
		metric.WithDescription("Life left of the app's access_token as this replica would serve it; 0 when it has none."),
		metric.WithUnit("s"))
	if err != nil {
		return err
	}
	mints, err := meter.Int64ObservableGauge("lockd.token.mints_today",
		metric.WithDescription("New access tokens the whole fleet minted for the app today (Asia/Shanghai), as last read from Redis."),
		metric.WithUnit("{token}"))
	if err != nil {
		return err
	}
	failures, err := meter.Int64ObservableGauge("lockd.token.refresh_failures",
		metric.WithDescription("Failed mints of the app's token in a row with this replica's credentials; 0 when the last one succeeded."),
		metric.WithUnit("{failure}"))
	if err != nil {
		return err
	}
	memory, err := meter.Int64ObservableGauge("lockd.token.from_memory",
		metric.WithDescription("1 while this replica serves the app's last token from memory because Redis cannot be reached."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := time.Now()
		for app, st := range s.byApp {
			attrs := s.attrs[app]
			o.ObserveFloat64(remaining, max(st.expire.Sub(now), 0).Seconds(), attrs)
			o.ObserveInt64(mints, st.mintsToday, attrs)
			o.ObserveInt64(failures, st.failures, attrs)
			var m int64
			if st.fromMemory {
				m = 1
			}
			o.ObserveInt64(memory, m, attrs)
		}
		return nil
	}, remaining, mints, failures, memory)
	return err
}

// TokenState records the state of app's access_token the broker read:
// when the token this replica would serve expires (by the local clock;
// zero without one), the fleet's mints today and failures in a row
// (negative when unknown: the last values stand), and whether the token
// comes from memory because Redis cannot be reached.
func (m *TokenMetrics) TokenState(app string, expire time.Time, mintsToday int64, failures int, fromMemory bool) {
	if m == nil {
		return
	}
	s := &m.states
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byApp == nil {
		s.byApp, s.attrs = map[string]*tokenState{}, map[string]metric.ObserveOption{}
	}
	st := s.byApp[app]
	if st == nil {
		st = &tokenState{}
		s.byApp[app] = st
		s.attrs[app] = metric.WithAttributeSet(attribute.NewSet(attribute.String("app", app)))
	}
	st.expire, st.fromMemory = expire, fromMemory
	if mintsToday >= 0 {
		st.mintsToday = mintsToday
	}
	if failures >= 0 {
		st.failures = int64(failures)
	}
}
