package token

import (
	"context"
	"errors"
	"sync"
	"time"
)

const (
	// refresherMaxSleep bounds how long the refresher goes without reading
	// a value's cache, in case a notice was lost or Redis lost its data.
	refresherMaxSleep = time.Minute
	// refresherMaxBackoff bounds the wait after Redis errors.
	refresherMaxBackoff = 30 * time.Second
)

// RunRefresher renews every app's token and tickets ahead of expiry until
// ctx ends. Run it on every replica: each wakes when the value it last read
// is due (Options.RefreshAhead before it expires, less a random jitter, but
// not before the upstream hands out a fresher one; for WeCom and tickets,
// just after the value expired), and the first to take the lock renews it;
// the others read the new value on its notice. Only values someone asked
// for within Options.IdleAfter are renewed, so an app nobody uses costs no
// mints. After a failed renewal the value is tried again when the failure's
// hold ends, and the last good value keeps being served while it is valid.
// Renewals under way when ctx ends are finished and stored.
func (b *Broker) RunRefresher(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range b.apps {
		for _, v := range a.values() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v.refreshLoop(ctx)
			}()
		}
	}
	wg.Wait()
}

func (v *value) refreshLoop(ctx context.Context) {
	r := refresh{v: v}
	for {
		notice := v.sig.await()
		wait := min(r.step(ctx), refresherMaxSleep)
		if ctx.Err() != nil {
			return
		}
		if wait <= 0 {
			continue
		}
		if err := v.sleep(ctx, notice, wait); err != nil {
			return
		}
	}
}

// refresh is one value's renewal schedule on this replica.
type refresh struct {
	v      *value
	errors int // consecutive failures to reach Redis
}

// step reads the cache, renews the value when it is due, and returns how
// long to sleep before the next step.
func (r *refresh) step(ctx context.Context) time.Duration {
	v := r.v
	st, err := v.read(ctx, false, "")
	if err != nil {
		return r.backoff(ctx, err)
	}
	r.errors = 0
	if !st.demand {
		// Nobody asked lately: let it expire. A caller's mint wakes us.
		return refresherMaxSleep
	}
	if stepped(st) {
		// Redis's clock stepped back: the value's expiry cannot be
		// trusted, so renew it (the upstream's answer sets it right).
		v.b.log.Warn("token: Redis's clock went back; renewing", "app", v.name)
	} else if wait := v.dueIn(st); wait > 0 {
		span := max(v.b.ahead(st.lifetime)-v.b.margin(st.lifetime), 0) / 2
		if st.fresherIn() >= wait {
			span = min(span, 100*time.Millisecond) // renew right after the value expires
		}
		return wait + jitter(span)
	}
	if st.failure != nil {
		return st.failure.RetryAfter + jitter(time.Second)
	}
	res, err := v.acquire(ctx)
	if err != nil {
		return r.backoff(ctx, err)
	}
	if !res.Acquired {
		// Another replica is renewing; its notice wakes us.
		return min(res.RetryAfter, v.b.opts.Recheck)
	}
	_, err = v.lead(ctx, res.Lease, want{cause: CauseAhead, caller: refresher})
	var te *Error
	switch {
	case err == nil, errors.Is(err, errWait):
		// Plan again from what is stored now.
		return time.Millisecond
	case errors.As(err, &te) && te.RetryAfter > 0:
		return te.RetryAfter + jitter(time.Second)
	}
	return r.backoff(ctx, err)
}

// backoff logs a failure to reach Redis and returns an exponential wait.
func (r *refresh) backoff(ctx context.Context, err error) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	r.errors++
	if r.errors == 1 || r.errors%10 == 0 {
		r.v.b.log.Warn("token: refresher cannot read the cache", "app", r.v.name, "err", err, "attempts", r.errors)
	}
	d := time.Second << min(r.errors-1, 5)
	return min(d, refresherMaxBackoff) + jitter(time.Second)
}
