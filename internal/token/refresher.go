package token

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

const (
	// refresherMaxSleep bounds how long the refresher goes without reading
	// an app's cache, in case a notice was lost or Redis lost its data.
	refresherMaxSleep = time.Minute
	// refresherMaxBackoff bounds the wait after Redis errors.
	refresherMaxBackoff = 30 * time.Second
)

// RunRefresher renews every app's token ahead of its expiry until ctx ends.
// Run it on every replica: each wakes when the token it last read has
// Options.RefreshAhead left, less a random jitter, and the first to take the
// app's lock renews it; the others read the new token on its notice. Only
// apps whose token was seen cached are renewed, so an app nobody asks for
// costs no mints. A token the upstream handed back unchanged (WeCom, and the
// stable API early in a token's life) is renewed when it expires. After a
// failed renewal the app is tried again when the failure's hold ends, and
// the last good token keeps being served while it is valid.
func (b *Broker) RunRefresher(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range b.apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.refreshLoop(ctx)
		}()
	}
	wg.Wait()
}

func (a *app) refreshLoop(ctx context.Context) {
	r := refresher{a: a}
	for {
		notice := a.sig.await()
		wait := min(r.step(ctx), refresherMaxSleep)
		if wait <= 0 {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-notice:
			// A token was stored or a mint failed: plan again.
		case <-timer.C:
		}
		timer.Stop()
	}
}

// refresher is one app's renewal schedule on this replica.
type refresher struct {
	a      *app
	seen   bool // a token was cached when last read: the app is in use
	errors int  // consecutive failures to reach Redis
}

// step reads the cache, renews the token when it is due, and returns how
// long to sleep before the next step.
func (r *refresher) step(ctx context.Context) time.Duration {
	a := r.a
	st, err := a.read(ctx)
	if err != nil {
		return r.backoff(ctx, err)
	}
	r.errors = 0
	if st.token == "" {
		if !r.seen {
			// Nobody has asked for this app yet; the first token's notice
			// wakes us.
			return refresherMaxSleep
		}
	} else {
		r.seen = true
		left := st.remaining()
		if st.same {
			// Nothing fresher before it expires; then the key is gone
			// and the next step mints.
			return left + jitter(time.Second)
		}
		if ahead := a.b.ahead(st.lifetime); left > ahead {
			return left - ahead + jitter((ahead-a.b.margin(st.lifetime))/2)
		}
	}
	if st.failure != nil {
		return st.failure.RetryAfter + jitter(time.Second)
	}
	res, err := a.b.locks.Acquire(ctx, redislock.Request{Key: a.name, Mode: redislock.Write, TTL: a.b.lockTTL})
	if err != nil {
		return r.backoff(ctx, err)
	}
	if !res.Acquired {
		// Another replica is minting; its notice wakes us.
		return min(res.RetryAfter, a.b.opts.Recheck)
	}
	_, err = a.lead(ctx, res.Lease, want{cause: CauseAhead})
	var te *Error
	switch {
	case err == nil:
		// The write's notice wakes the loop at once; should it be lost,
		// do not call the upstream again before a transient failure's hold.
		return a.b.opts.UnavailableHold
	case errors.As(err, &te) && te.RetryAfter > 0:
		return te.RetryAfter + jitter(time.Second)
	}
	return r.backoff(ctx, err)
}

// backoff logs a failure to reach Redis and returns an exponential wait.
func (r *refresher) backoff(ctx context.Context, err error) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	r.errors++
	if r.errors == 1 || r.errors%10 == 0 {
		r.a.b.log.Warn("token: refresher cannot read the cache", "app", r.a.name, "err", err, "attempts", r.errors)
	}
	d := time.Second << min(r.errors-1, 5)
	return min(d, refresherMaxBackoff) + jitter(time.Second)
}
