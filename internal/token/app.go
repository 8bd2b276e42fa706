package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/wechat"
)

// app is one served app: its upstream client, keys, notices and the calls
// in flight in this process.
type app struct {
	b      *Broker
	name   string
	client *wechat.Client
	keys   keys
	sig    *signal

	mu      sync.Mutex
	flights map[string]*flight
}

// want is what a call needs from the cache.
type want struct {
	cause   Cause
	invalid string // CauseInvalid: the token the caller reported
}

// key names the flight that serves w: every Get shares one, every Refresh
// of the same token shares one.
func (w want) key() string {
	if w.cause == CauseInvalid {
		return "refresh:" + w.invalid
	}
	return "get"
}

// flight is one Redis conversation shared by the concurrent calls of this
// process that want the same thing.
type flight struct {
	done   chan struct{}
	tok    Token
	err    error
	refs   int
	cancel context.CancelFunc
}

// join runs w through the flight for it, starting one if none is under
// way, and waits for its result or ctx. The flight runs on the broker's
// context, bounded by MaxWait; when every caller has left it stops, unless
// it is minting.
func (a *app) join(ctx context.Context, w want) (Token, error) {
	key := w.key()
	a.mu.Lock()
	if a.b.ctx.Err() != nil {
		a.mu.Unlock()
		return Token{}, ErrClosed
	}
	f := a.flights[key]
	if f == nil {
		fctx, cancel := context.WithTimeout(a.b.ctx, a.b.opts.MaxWait)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		a.flights[key] = f
		go a.fly(fctx, key, f, w)
	}
	f.refs++
	a.mu.Unlock()

	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		a.mu.Lock()
		f.refs--
		if f.refs == 0 && a.flights[key] == f {
			delete(a.flights, key)
			f.cancel()
		}
		a.mu.Unlock()
		return Token{}, ctx.Err()
	}
}

func (a *app) fly(ctx context.Context, key string, f *flight, w want) {
	tok, err := a.obtain(ctx, w)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The flight's own bound, not a caller's deadline, ended it.
		if a.b.ctx.Err() != nil {
			err = ErrClosed
		} else {
			err = fmt.Errorf("%w for app %q after %v", ErrTimeout, a.name, a.b.opts.MaxWait)
		}
	}
	a.mu.Lock()
	if a.flights[key] == f {
		delete(a.flights, key)
	}
	f.tok, f.err = tok, err
	a.mu.Unlock()
	f.cancel()
	close(f.done)
}

// obtain returns a token that satisfies w: from the cache, from a mint of
// its own while holding the app's lock, or from another replica's mint,
// announced by a notice or found by a periodic re-check.
func (a *app) obtain(ctx context.Context, w want) (Token, error) {
	for {
		// Take the notice channel before reading: a token stored after
		// the read closes it.
		notice := a.sig.await()
		st, err := a.read(ctx)
		if err != nil {
			return Token{}, err
		}
		if tok, ok := a.satisfies(st, w); ok {
			return tok, nil
		}
		if st.failure != nil {
			return Token{}, st.failure
		}
		res, err := a.b.locks.Acquire(ctx, redislock.Request{Key: a.name, Mode: redislock.Write, TTL: a.b.lockTTL})
		if err != nil {
			return Token{}, a.redisErr(err)
		}
		if res.Acquired {
			return a.lead(ctx, res.Lease, w)
		}
		timer := time.NewTimer(max(min(res.RetryAfter, a.b.opts.Recheck), time.Millisecond))
		select {
		case <-notice:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return Token{}, ctx.Err()
		}
		timer.Stop()
	}
}

// satisfies reports whether the cached state answers w without a mint.
func (a *app) satisfies(st state, w want) (Token, bool) {
	left := st.remaining()
	if left <= 0 {
		return Token{}, false
	}
	switch w.cause {
	case CauseInvalid:
		if st.token == w.invalid {
			// Reported again right after a Refresh minted it: the
			// upstream just vouched for it (WeCom hands out the same token
			// while it is valid), so do not ask again at once.
			fresh := st.cause == CauseInvalid && st.now.Sub(st.written) < a.b.opts.RefreshCooldown
			return st.result(), fresh
		}
		return st.result(), a.servable(st)
	case CauseAhead:
		return st.result(), st.same || left > a.b.ahead(st.lifetime)
	}
	return st.result(), a.servable(st)
}

// servable reports whether Get may hand out the cached token: it has more
// than the margin left, or the upstream offers nothing fresher (it handed
// the same token back), or the upstream is failing (keep serving the last
// good token while it is valid).
func (a *app) servable(st state) bool {
	left := st.remaining()
	return left > 0 && (left > a.b.margin(st.lifetime) || st.same || st.failure != nil)
}

// lead mints while holding the app's lock: it reads the cache again (a
// replica that held the lock before may have minted), mints, stores the
// token and releases the lock.
func (a *app) lead(ctx context.Context, lease redislock.Lease, w want) (Token, error) {
	// A mint once begun is finished and stored even if every caller left.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.b.lockTTL)
	defer cancel()
	// The lock is kept alive while the upstream answers, however slowly;
	// should it be lost anyway, the mint stops before another replica's
	// could overlap it.
	ctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		err := a.b.locks.KeepAlive(ctx, a.name, lease.ID, 0, func(redislock.Lease) error { return nil })
		if errors.Is(err, redislock.ErrNotHeld) {
			lost(err)
		}
	}()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, err := a.b.locks.Release(rctx, a.name, lease.ID, ""); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
			a.b.log.Warn("token: releasing the app's lock", "app", a.name, "err", err)
		}
	}()

	st, err := a.read(ctx)
	if err != nil {
		return Token{}, err
	}
	if tok, ok := a.satisfies(st, w); ok {
		return tok, nil
	}
	if st.failure != nil {
		return Token{}, st.failure
	}

	var limited *Error
	force := false
	if w.cause == CauseInvalid && st.token == w.invalid && a.client.ForceRefreshes() {
		// The stable API hands out the cached token again until its last
		// minutes; only force_refresh replaces it.
		force, limited, err = a.allowForce(ctx, st.now)
		if err != nil {
			return Token{}, err
		}
	}
	tok, sent, err := a.mint(ctx, w.cause, force)
	if err != nil && force && errors.Is(err, wechat.ErrQuota) {
		// WeChat refused the force_refresh itself. Its normal mode may
		// still hand out a newer token, minted outside lockd.
		limited = &Error{App: a.name, Err: fmt.Errorf("%w: %w", ErrRefreshLimited, err)}
		tok, sent, err = a.mint(ctx, w.cause, false)
	}
	if err != nil {
		return a.mintFailed(ctx, st, w, err)
	}
	cause := w.cause
	if limited != nil && tok.AccessToken == w.invalid {
		// Not a replacement: later reporters should try again once the
		// limit allows, not be told the upstream vouched for it.
		cause = CauseDemand
	}
	out, err := a.write(ctx, st, tok, sent, cause, lease.FencingToken)
	if err != nil {
		return Token{}, err
	}
	if limited != nil && out.AccessToken == w.invalid {
		return Token{}, limited
	}
	return out, nil
}

// allowForce takes a force_refresh from the app's budget, or says why not.
func (a *app) allowForce(ctx context.Context, now time.Time) (bool, *Error, error) {
	day := Day(now)
	reply, err := forceScript.Run(ctx, a.b.rdb, []string{a.keys.forces(day), a.keys.forceGate()},
		a.b.opts.ForceRefreshPerDay, a.b.opts.ForceRefreshInterval.Milliseconds(), counterTTL.Milliseconds()).Slice()
	if err != nil {
		return false, nil, a.redisErr(err)
	}
	ok, why, wait, err := parseForce(reply, now, a.b.opts.ForceRefreshPerDay)
	if err != nil || ok {
		return ok, nil, err
	}
	a.b.log.Warn("token: force_refresh not allowed now", "app", a.name, "reason", why, "retry_after", wait.String())
	return false, &Error{App: a.name, Err: fmt.Errorf("%w: %s", ErrRefreshLimited, why), RetryAfter: wait}, nil
}

// mint calls the upstream once, reporting the outcome to the observer and
// the log. It returns when the request was sent, which the token's lifetime
// counts from.
func (a *app) mint(ctx context.Context, cause Cause, force bool) (wechat.Token, time.Time, error) {
	sent := time.Now()
	tok, err := a.client.Mint(ctx, force)
	obs := a.b.opts.Observer
	var we *wechat.Error
	switch {
	case err == nil:
		obs.TokenMinted(a.name)
		if co, ok := obs.(CauseObserver); ok {
			co.TokenMintedBecause(a.name, cause)
		}
		a.b.log.Info("token: minted", "app", a.name, "cause", cause.String(), "force_refresh", force,
			"expires_in", tok.ExpiresIn.String(), "took", time.Since(sent).Round(time.Millisecond).String())
	case errors.As(err, &we):
		if we.Errcode != 0 {
			obs.TokenUpstreamError(a.name, we.Errcode)
		} else {
			obs.TokenTransportError(a.name)
		}
		level := slog.LevelWarn
		if we.Class == wechat.ClassCredentials {
			level = slog.LevelError
		}
		a.b.log.Log(ctx, level, "token: mint failed", "app", a.name, "cause", cause.String(), "force_refresh", force,
			"class", we.Class.String(), "errcode", we.Errcode, "err", err)
	}
	return tok, sent, err
}

// mintFailed records a failed mint for the fleet and decides the answer:
// the last good token while it is valid (unless it is the one reported
// invalid), else the failure.
func (a *app) mintFailed(ctx context.Context, st state, w want, err error) (Token, error) {
	var we *wechat.Error
	if !errors.As(err, &we) {
		return Token{}, err // the broker is closing
	}
	hold := a.b.opts.UnavailableHold
	switch we.Class {
	case wechat.ClassCredentials:
		hold = a.b.opts.CredentialsHold
	case wechat.ClassQuota:
		hold = a.b.opts.QuotaHold
	}
	if ferr := failScript.Run(ctx, a.b.rdb, []string{a.keys.failure},
		encodeFailure(we), hold.Milliseconds(), a.keys.channel, a.b.publish).Err(); ferr != nil {
		a.b.log.Warn("token: recording the failed mint", "app", a.name, "err", ferr)
	}
	if st.token != "" && st.token != w.invalid && st.remaining() > 0 {
		return st.result(), nil
	}
	return Token{}, &Error{App: a.name, Err: we, RetryAfter: hold}
}

// write stores a minted token and announces it. When Redis fails, the token
// is still good: it is returned, with its expiry by the local clock.
func (a *app) write(ctx context.Context, st state, tok wechat.Token, sent time.Time, cause Cause, fence uint64) (Token, error) {
	elapsed := time.Since(sent)
	reply, err := writeScript.Run(ctx, a.b.rdb, []string{a.keys.base, a.keys.failure, a.keys.mints(Day(st.now))},
		tok.AccessToken, tok.ExpiresIn.Milliseconds(), elapsed.Milliseconds(), cause.String(), fence,
		a.keys.channel, a.b.publish, counterTTL.Milliseconds()).Slice()
	if err != nil {
		a.b.log.Warn("token: storing the minted token failed; returning it uncached", "app", a.name, "err", err)
		return Token{AccessToken: tok.AccessToken, ExpireTime: sent.Add(tok.ExpiresIn)}, nil
	}
	res, expire, err := parseWrite(reply)
	switch {
	case err != nil:
		return Token{}, err
	case res.newer != nil:
		a.b.log.Warn("token: a newer minter stored its token first; returning that one", "app", a.name)
		return *res.newer, nil
	case !res.stored:
		return Token{}, &Error{App: a.name, Err: &wechat.Error{Class: wechat.ClassUnavailable, Endpoint: a.client.Endpoint(),
			Err: fmt.Errorf("the token's expires_in (%v) ran out before it was stored", tok.ExpiresIn)}}
	}
	return Token{AccessToken: tok.AccessToken, ExpireTime: expire}, nil
}

// read runs read.lua for the app.
func (a *app) read(ctx context.Context) (state, error) {
	reply, err := readScript.Run(ctx, a.b.rdb, []string{a.keys.base, a.keys.failure}).Slice()
	if err != nil {
		return state{}, a.redisErr(err)
	}
	return readState(reply, a.name)
}

// redisErr names the app on a Redis error, keeping context errors as they
// are so that deadlines pass through.
func (a *app) redisErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("token: app %q: redis: %w", a.name, err)
}
