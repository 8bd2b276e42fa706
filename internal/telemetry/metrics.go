package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lockd/lockd/internal/redislock"
)

// waitBuckets bound lockd_lock_wait_seconds: an uncontended grant takes a
// Redis round trip (well under a millisecond on a LAN), a handoff a few
// milliseconds, and a contended wait can last as long as its caller allows.
var waitBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300,
}

// holdBuckets bound lockd_lock_hold_seconds: from a critical section of a
// few milliseconds to a leader lease held for hours.
var holdBuckets = []float64{
	0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400,
}

// Label values of lockd_lock_wait_seconds' outcome.
const (
	outcomeGranted = "granted"
	outcomeTimeout = "timeout"
)

// modes is the number of per-mode attribute slots: unknown, read, write,
// permit.
const modes = 4

// modeIndex maps a mode to its slot; 0 holds modes this package does not know.
func modeIndex(m redislock.Mode) int {
	switch m {
	case redislock.Read:
		return 1
	case redislock.Write:
		return 2
	case redislock.Permit:
		return 3
	}
	return 0
}

// modeLabel is the mode label's value for a slot.
func modeLabel(i int) string {
	switch i {
	case 1:
		return redislock.Read.String()
	case 2:
		return redislock.Write.String()
	case 3:
		return redislock.Permit.String()
	}
	return "unknown"
}

// LockMetrics records the lock engine's events as lockd_lock_grants_total
// {mode}, lockd_lock_wait_seconds {mode, outcome}, lockd_lock_hold_seconds
// {mode}, lockd_lock_lost_total and lockd_lock_data_loss_total. It
// implements [redislock.DataLossObserver] without allocating. A nil
// *LockMetrics records nothing.
type LockMetrics struct {
	grants   metric.Int64Counter
	wait     metric.Float64Histogram
	hold     metric.Float64Histogram
	lost     metric.Int64Counter
	dataLoss metric.Int64Counter

	// Precomputed per mode, so that the hot path builds no attribute sets.
	grantOpts   [modes][]metric.AddOption
	grantedOpts [modes][]metric.RecordOption
	timeoutOpts [modes][]metric.RecordOption
	holdOpts    [modes][]metric.RecordOption
}

var _ redislock.DataLossObserver = (*LockMetrics)(nil)

// newLockMetrics creates the lock instruments on meter.
func newLockMetrics(meter metric.Meter) (*LockMetrics, error) {
	m := &LockMetrics{}
	var err error
	if m.grants, err = meter.Int64Counter("lockd.lock.grants",
		metric.WithDescription("Leases granted, re-entries not counted."),
		metric.WithUnit("{lease}")); err != nil {
		return nil, err
	}
	if m.wait, err = meter.Float64Histogram("lockd.lock.wait",
		metric.WithDescription("Time callers waited for a lock, by whether the wait ended granted or without the lock."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, err
	}
	if m.hold, err = meter.Float64Histogram("lockd.lock.hold",
		metric.WithDescription("Time leases were held until released."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		return nil, err
	}
	if m.lost, err = meter.Int64Counter("lockd.lock.lost",
		metric.WithDescription("Leases KeepAlive found gone before they were released."),
		metric.WithUnit("{lease}")); err != nil {
		return nil, err
	}
	if m.dataLoss, err = meter.Int64Counter("lockd.lock.data_loss",
		metric.WithDescription("Times this replica learnt that Redis lost lockd's data (a restart without it, a failover to a lagging replica) and new grants were held back for the data-loss grace."),
		metric.WithUnit("{event}")); err != nil {
		return nil, err
	}
	// Export the counts from the start, at 0: an alert on their rate must
	// not wait for the first event to find the series.
	m.lost.Add(context.Background(), 0)
	m.dataLoss.Add(context.Background(), 0)
	for i := range modes {
		mode := attribute.String("mode", modeLabel(i))
		m.grantOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(mode))}
		m.holdOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(mode))}
		m.grantedOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(mode, attribute.String("outcome", outcomeGranted)))}
		m.timeoutOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(mode, attribute.String("outcome", outcomeTimeout)))}
	}
	return m, nil
}

// Granted counts a new lease and records how long its caller waited.
func (m *LockMetrics) Granted(mode redislock.Mode, waited time.Duration) {
	if m == nil {
		return
	}
	i := modeIndex(mode)
	ctx := context.Background()
	m.grants.Add(ctx, 1, m.grantOpts[i]...)
	m.wait.Record(ctx, waited.Seconds(), m.grantedOpts[i]...)
}

// Waited records a wait that ended without the lock, as outcome "timeout".
func (m *LockMetrics) Waited(mode redislock.Mode, waited time.Duration) {
	if m == nil {
		return
	}
	m.wait.Record(context.Background(), waited.Seconds(), m.timeoutOpts[modeIndex(mode)]...)
}

// Released records how long a released lease was held.
func (m *LockMetrics) Released(mode redislock.Mode, held time.Duration) {
	if m == nil {
		return
	}
	m.hold.Record(context.Background(), held.Seconds(), m.holdOpts[modeIndex(mode)]...)
}

// Lost counts a lease that KeepAlive found gone.
func (m *LockMetrics) Lost() {
	if m == nil {
		return
	}
	m.lost.Add(context.Background(), 1)
}

// DataLoss counts a data loss the engine learnt of.
func (m *LockMetrics) DataLoss() {
	if m == nil {
		return
	}
	m.dataLoss.Add(context.Background(), 1)
}

// ErrcodeTransport is the errcode label of upstream calls that got no
// answer to read an errcode from: connection failures, timeouts, bad bodies.
const ErrcodeTransport = "transport"

// TokenMetrics records the token broker's events as
// lockd_token_mints_total{app}, lockd_token_upstream_errors_total{app,errcode},
// lockd_token_fetches_total{app,value,outcome} and
// lockd_token_possible_mints_total{app}, and each app's token state as the
// gauges of TokenState. A nil *TokenMetrics records nothing.
type TokenMetrics struct {
	mints    metric.Int64Counter
	errors   metric.Int64Counter
	fetches  metric.Int64Counter
	possible metric.Int64Counter
	states   tokenStates
}

// newTokenMetrics creates the token instruments on meter.
func newTokenMetrics(meter metric.Meter) (*TokenMetrics, error) {
	m := &TokenMetrics{}
	var err error
	if m.mints, err = meter.Int64Counter("lockd.token.mints",
		metric.WithDescription("Access tokens fetched from the upstream and stored."),
		metric.WithUnit("{token}")); err != nil {
		return nil, err
	}
	if m.errors, err = meter.Int64Counter("lockd.token.upstream_errors",
		metric.WithDescription("Failed upstream token calls, by the upstream's errcode, or \"transport\" when there was none."),
		metric.WithUnit("{error}")); err != nil {
		return nil, err
	}
	if m.fetches, err = meter.Int64Counter("lockd.token.fetches",
		metric.WithDescription("Calls of the upstream's token and ticket endpoints by this replica, by value (access_token or the ticket type) and outcome: new, same (the current value again), renewed (the current value with its life renewed), error, or paced (not sent: the fleet's pace or hourly bound for the value)."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if m.possible, err = meter.Int64Counter("lockd.token.possible_mints",
		metric.WithDescription("Token calls that got no answer after the request was sent: the upstream may have minted (counted in lockd_token_mints_today too)."),
		metric.WithUnit("{call}")); err != nil {
		return nil, err
	}
	if err := m.states.register(meter); err != nil {
		return nil, err
	}
	return m, nil
}

// TokenMinted counts a token minted for app.
func (m *TokenMetrics) TokenMinted(app string) {
	if m == nil {
		return
	}
	m.mints.Add(context.Background(), 1, metric.WithAttributes(attribute.String("app", app)))
}

// TokenUpstreamError counts an upstream answer for app carrying an error
// code (WeChat's errcode in decimal, OAuth2's error, ...), labelled with it.
func (m *TokenMetrics) TokenUpstreamError(app, code string) {
	m.upstreamError(app, code)
}

// TokenFetched counts a call of the upstream's token or ticket endpoint
// for app's value ("access_token" or a ticket type), by outcome.
func (m *TokenMetrics) TokenFetched(app, value, outcome string) {
	if m == nil {
		return
	}
	m.fetches.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("app", app), attribute.String("value", value), attribute.String("outcome", outcome)))
}

// TokenPossiblyMinted counts a token call for app that got no answer
// after its request was sent.
func (m *TokenMetrics) TokenPossiblyMinted(app string) {
	if m == nil {
		return
	}
	m.possible.Add(context.Background(), 1, metric.WithAttributes(attribute.String("app", app)))
}

// TokenTransportError counts an upstream call for app that failed without
// an errcode, labelled [ErrcodeTransport].
func (m *TokenMetrics) TokenTransportError(app string) {
	m.upstreamError(app, ErrcodeTransport)
}

func (m *TokenMetrics) upstreamError(app, errcode string) {
	if m == nil {
		return
	}
	m.errors.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("app", app),
		attribute.String("errcode", errcode),
	))
}
