package token

import (
	"context"
	"time"
)

// AppState is what an administrator may know of an app's access_token:
// never the token itself.
type AppState struct {
	// App names the app.
	App string
	// HasToken is true while a token is cached.
	HasToken bool
	// ExpireTime is when the cached token expires, by Redis's clock.
	ExpireTime time.Time
	// LastMint is when the cached token was written.
	LastMint time.Time
	// MintsToday counts the tokens the fleet minted on WeChat's day.
	MintsToday int64
	// NextRefresh is when the token is due to be renewed ahead of its
	// expiry; zero without a token.
	NextRefresh time.Time
	// LastError is the upstream's last recorded failure, or "" when none
	// is kept (a failure record lasts an hour past its hold).
	LastError string
	// FailedAttempts counts the failed mints in a row.
	FailedAttempts int
	// RetryTime is when a mint may be tried after LastError.
	RetryTime time.Time
}

// Describe returns the state of app's access_token, read from Redis
// without marking it in demand and without minting.
func (b *Broker) Describe(ctx context.Context, app string) (AppState, error) {
	a, err := b.app(app)
	if err != nil {
		return AppState{}, err
	}
	v := a.token
	st, err := v.read(ctx, false, "")
	if err != nil {
		return AppState{}, err
	}
	out := AppState{App: app, HasToken: st.token != "" && st.left() > 0, MintsToday: st.mintsToday, FailedAttempts: st.attempts}
	if st.token != "" {
		out.ExpireTime, out.LastMint = st.expire, st.written
		out.NextRefresh = st.nowish().Add(v.dueIn(st))
	}
	if st.lastFail != nil {
		out.LastError = st.lastFail.Error()
		out.RetryTime = st.failUntil
	}
	return out, nil
}
