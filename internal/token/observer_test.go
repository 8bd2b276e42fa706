package token_test

import (
	"github.com/lockd/lockd/internal/telemetry"
	"github.com/lockd/lockd/internal/token"
)

// The telemetry package's token metrics plug in as the broker's Observer.
var _ token.Observer = (*telemetry.TokenMetrics)(nil)

// They also take the state of each app's token, and why each was minted is
// left to the log.
var _ token.StateObserver = (*telemetry.TokenMetrics)(nil)

// The tests' observer counts every upstream call too.
var _ token.FetchObserver = (*observer)(nil)
