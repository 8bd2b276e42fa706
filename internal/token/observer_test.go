package token_test

import (
	"github.com/lockd/lockd/internal/telemetry"
	"github.com/lockd/lockd/internal/token"
)

// The telemetry package's token metrics plug in as the broker's Observer.
var _ token.Observer = (*telemetry.TokenMetrics)(nil)
