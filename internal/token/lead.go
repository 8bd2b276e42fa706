package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/upstream"
)

// lead works while holding the value's lock: it reads the cache again (a
// replica that held the lock before may have minted), mints when the value
// still needs it, stores it and releases the lock. A mint once begun is
// finished and stored even if every caller left or the broker is closing.
func (v *value) lead(ctx context.Context, lease redislock.Lease, w want) (Token, error) {
	if !v.b.startLead() {
		v.release(ctx, lease)
		return Token{}, ErrClosed
	}
	defer v.b.leads.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.b.leadTimeout())
	defer cancel()
	// The lock is kept alive while the upstream answers, however slowly;
	// should it be lost anyway, the mint stops before another replica's
	// could overlap it.
	ctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go func() {
		err := v.b.locks.KeepAlive(ctx, v.lockKey, lease.ID, 0, func(redislock.Lease) error { return nil })
		if errors.Is(err, redislock.ErrNotHeld) {
			lost(err)
		}
	}()
	defer v.release(ctx, lease)

	st, err := v.read(ctx, false, w.reporter())
	if err != nil {
		return Token{}, err
	}
	if w.cause == CauseInvalid {
		return v.leadReport(ctx, st, w)
	}
	return v.leadDemand(ctx, st, w)
}

// release gives the lock back.
func (v *value) release(ctx context.Context, lease redislock.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := v.b.locks.Release(rctx, v.lockKey, lease.ID, ""); err != nil && !errors.Is(err, redislock.ErrNotHeld) {
		v.b.log.Warn("token: releasing the lock", "app", v.name, "err", err)
	}
}

// leadDemand mints a value for callers (or the refresher) that found none
// with enough life left, unless the state read under the lock says that
// none is needed or none can be had yet.
func (v *value) leadDemand(ctx context.Context, st state, w want) (Token, error) {
	if w.cause == CauseAhead {
		if wait := v.dueIn(st); wait > 0 && !stepped(st) {
			return st.result(), nil
		}
	} else if v.servable(st) {
		return st.result(), nil
	}
	if st.failure != nil {
		return Token{}, st.failure
	}
	if w.cause != CauseAhead && st.fresherIn() > 0 {
		// The upstream would hand out the cached value again.
		return Token{}, errWait
	}
	got, err := v.fetch(ctx, w, false)
	if err != nil {
		return v.mintFailed(ctx, st, w, err)
	}
	return v.store(ctx, st, got, w, false)
}

// minted is what the upstream handed out, and when the request went and
// the reply came.
type minted struct {
	tok        upstream.Token
	sent, recv time.Time
}

// fetch calls the upstream once for the value, within the fleet's pace
// and hourly bound for it: a token mint, or a ticket fetched with the
// app's token (reporting that token once should the upstream refuse it). It
// logs the outcome with the caller, and counts a call that got no answer
// after it was sent as a possible mint.
func (v *value) fetch(ctx context.Context, w want, force bool) (minted, error) {
	if v.ticket != "" {
		return v.fetchTicket(ctx, w)
	}
	if err := v.pace(ctx); err != nil {
		return minted{}, err
	}
	sent := time.Now()
	tok, err := v.a.client.Mint(ctx, force)
	recv := time.Now()
	if err != nil {
		v.fetchFailed(ctx, err)
		v.upstreamFailed(ctx, w, "mint", err, slog.Bool("force_refresh", force))
		return minted{}, err
	}
	v.b.log.Info("token: upstream answered", "app", v.name, "cause", w.cause.String(), "client", w.caller.String(),
		"force_refresh", force, "expires_in", tok.ExpiresIn.String(), "took", recv.Sub(sent).Round(time.Millisecond).String())
	return minted{tok: tok, sent: sent, recv: recv}, nil
}

// valueLabel names the value in metrics: "access_token" or the ticket type.
func (v *value) valueLabel() string {
	if v.ticket == "" {
		return "access_token"
	}
	return string(v.ticket)
}

// fetched tells a FetchObserver about an upstream call's outcome.
func (v *value) fetched(outcome string) {
	if fo, ok := v.b.opts.Observer.(FetchObserver); ok {
		fo.TokenFetched(v.a.name, v.valueLabel(), outcome)
	}
}

// fetchFailed counts a failed upstream call, and one that got no answer
// after its request was sent as a mint the upstream may have made: the
// value's count of the day errs high rather than hide a spent quota. Only
// a token call is a possible mint to the observer, whose count stands
// beside the app's token mints.
func (v *value) fetchFailed(ctx context.Context, err error) {
	var we *upstream.Error
	if !errors.As(err, &we) {
		return
	}
	v.fetched("error")
	if !we.Transport || !we.Sent {
		return
	}
	if fo, ok := v.b.opts.Observer.(FetchObserver); ok && v.ticket == "" {
		fo.TokenPossiblyMinted(v.a.name)
	}
	key := v.keys.mints(Day(time.Now()))
	if _, perr := v.b.rdb.TxPipelined(context.WithoutCancel(ctx), func(p redis.Pipeliner) error {
		p.Incr(ctx, key)
		p.PExpire(ctx, key, counterTTL)
		return nil
	}); perr != nil {
		v.b.log.Warn("token: counting a possible mint", "app", v.name, "err", perr)
	}
	v.b.log.Warn("token: the upstream did not answer a request it received; counted as a possible mint", "app", v.name)
}

// pace waits until the fleet's pace lets the value's next upstream call go
// (Options.FetchInterval after the last), and takes it from the hour's
// bound (Options.FetchesPerHour), whatever the upstream answered before.
// A spent bound is an *Error wrapping ErrFetchLimited.
func (v *value) pace(ctx context.Context) error {
	o := v.b.opts
	for {
		reply, err := paceScript.Run(ctx, v.b.rdb, []string{v.keys.gate, v.keys.calls},
			o.FetchInterval.Milliseconds(), o.FetchesPerHour).Slice()
		if err != nil {
			return v.redisErr(err)
		}
		if ok, _ := reply[0].(int64); ok == 1 {
			return nil
		}
		kind, _ := reply[1].(string)
		wait, _ := reply[2].(int64)
		d := time.Duration(wait) * time.Millisecond
		if kind == "hour" {
			v.fetched("paced")
			v.b.log.Warn("token: the value's upstream calls reached their hourly bound", "app", v.name,
				"bound", o.FetchesPerHour, "retry_after", d.Round(time.Second).String())
			return v.errorf(ErrFetchLimited, d, "%d upstream calls within the hour", o.FetchesPerHour)
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

func (v *value) fetchTicket(ctx context.Context, w want) (minted, error) {
	caller := Caller{Name: "(ticket " + string(v.ticket) + ")", RefreshesPerHour: -1}
	for attempt := 0; ; attempt++ {
		at, err := v.a.token.join(ctx, want{cause: CauseDemand, caller: w.caller})
		if err != nil {
			return minted{}, err
		}
		if err := v.pace(ctx); err != nil {
			return minted{}, err
		}
		sent := time.Now()
		tok, err := v.a.client.Ticket(ctx, at.AccessToken, v.ticket)
		recv := time.Now()
		if err != nil {
			v.fetchFailed(ctx, err)
		}
		if err == nil {
			v.b.log.Info("token: ticket fetched", "app", v.name, "cause", w.cause.String(), "client", w.caller.String(),
				"expires_in", tok.ExpiresIn.String(), "took", recv.Sub(sent).Round(time.Millisecond).String())
			return minted{tok: tok, sent: sent, recv: recv}, nil
		}
		if !errors.Is(err, upstream.ErrTokenRejected) || attempt > 0 {
			v.upstreamFailed(ctx, w, "ticket", err)
			return minted{}, err
		}
		// The upstream refused the token: report it, as a client would,
		// and ask again with its replacement.
		v.b.log.Warn("token: the upstream refused the app's token for a ticket; reporting it", "app", v.name, "err", err)
		if _, rerr := v.a.token.join(ctx, want{cause: CauseInvalid, invalid: at.AccessToken, caller: caller, confirmed: true}); rerr != nil {
			return minted{}, rerr
		}
	}
}

// upstreamFailed reports a failed upstream call to the observer and the log.
func (v *value) upstreamFailed(ctx context.Context, w want, what string, err error, attrs ...slog.Attr) {
	var we *upstream.Error
	if !errors.As(err, &we) {
		return // the caller's or the broker's context ended
	}
	obs := v.b.opts.Observer
	if code := we.CodeText(); code != "" {
		obs.TokenUpstreamError(v.a.name, code)
	} else {
		obs.TokenTransportError(v.a.name)
	}
	level := slog.LevelWarn
	if we.Class == upstream.ClassCredentials {
		level = slog.LevelError
	}
	args := []any{"app", v.name, "cause", w.cause.String(), "client", w.caller.String(),
		"class", we.Class.String(), "errcode", we.CodeText(), "err", err}
	for _, a := range attrs {
		args = append(args, a)
	}
	v.b.log.Log(ctx, level, "token: "+what+" failed", args...)
}

// mintFailed records a failed mint for the replicas sharing the credentials
// and decides the answer: the last good value while callers can still use
// it (unless it is the one reported invalid), else the failure.
func (v *value) mintFailed(ctx context.Context, st state, w want, err error) (Token, error) {
	usable := st.token != "" && st.token != w.invalid && st.left() > v.b.minMargin(st.lifetime)
	if errors.Is(err, ErrFetchLimited) && usable {
		return st.result(), nil
	}
	var we *upstream.Error
	if !errors.As(err, &we) {
		return Token{}, err // the broker is closing, Redis failed, or a bound is reached
	}
	hold := v.hold(we, st.attempts+1, st.nowish())
	if ferr := failScript.Run(ctx, v.b.rdb, []string{v.keys.failure},
		encodeFailure(we), hold.Milliseconds(), failureKeep.Milliseconds(),
		v.a.keys.channel, v.b.publish, v.payload).Err(); ferr != nil {
		v.b.log.Warn("token: recording the failed mint", "app", v.name, "err", ferr)
	}
	// st was read before the mint: it counts the time since.
	if usable {
		return st.result(), nil
	}
	return Token{}, &Error{App: v.name, Err: we, RetryAfter: hold}
}

// hold is how long the replicas with these credentials leave the upstream
// alone after the attempts-th failure in a row: the class's first hold,
// doubling each time up to MaxHold, with up to a fifth more of jitter; a
// spent daily quota holds until WeChat's day turns, trying again every
// QuotaProbe meanwhile.
func (v *value) hold(we *upstream.Error, attempts int, now time.Time) time.Duration {
	o := v.b.opts
	first := o.UnavailableHold
	switch we.Class {
	case upstream.ClassCredentials:
		first = o.CredentialsHold
	case upstream.ClassQuota:
		first = o.QuotaHold
		if we.Errcode == 45009 {
			return min(untilNextDay(now), o.QuotaProbe) + jitter(time.Minute)
		}
	}
	d := first
	for i := 1; i < attempts && d < o.MaxHold; i++ {
		d *= 2
	}
	d = min(d, max(o.MaxHold, first))
	return d + time.Duration(rand.Float64()*float64(d)/5)
}

// store writes a value the upstream handed out and announces it. When Redis
// fails, the value is still good: it is returned, with its expiry by the
// local clock. It returns errWait when the value has no life left to serve
// (the upstream handed out its current value in its last second).
func (v *value) store(ctx context.Context, st state, got minted, w want, force bool) (Token, error) {
	k := v.keys
	reply, err := writeScript.Run(ctx, v.b.rdb, []string{k.value, k.failure, k.mints(Day(st.nowish()))},
		got.tok.AccessToken, got.tok.ExpiresIn.Milliseconds(),
		time.Since(got.sent).Milliseconds(), time.Since(got.recv).Milliseconds(),
		v.b.opts.ExpirySlack.Milliseconds(), freshWindowMS(v), boolArg(force), st.gen,
		w.cause.String(), v.a.keys.channel, v.b.publish, v.payload, counterTTL.Milliseconds(), keepAfterExpiry.Milliseconds(),
		boolArg(v.ticket == "" && v.a.traits.Renews), v.knownVersion(), max(v.b.opts.FetchInterval, time.Second).Milliseconds()).Slice()
	if err != nil {
		v.fetched("new")
		v.b.log.Warn("token: storing the value failed; returning it uncached", "app", v.name, "err", err)
		expire := got.sent.Add(got.tok.ExpiresIn - v.b.opts.ExpirySlack)
		if time.Until(expire) <= v.b.opts.MinMargin {
			return Token{}, v.redisErr(err)
		}
		return Token{AccessToken: got.tok.AccessToken, ExpireTime: expire}, nil
	}
	res, err := parseWrite(reply)
	switch {
	case err != nil:
		return Token{}, err
	case res.newer != nil:
		v.fetched("new")
		v.b.log.Warn("token: another minter stored its value first; returning that one", "app", v.name)
		return *res.newer, nil
	}
	switch {
	case res.renewed:
		v.fetched("renewed")
	case res.same:
		v.fetched("same")
	default:
		v.fetched("new")
	}
	// Redis ran the script before now: the local expiry errs late, so
	// that a later read does not pass for a clock stepping back.
	local := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return time.Now().Add(t.Sub(res.now))
	}
	v.mu.Lock()
	v.mem = memory{token: got.tok.AccessToken, gen: res.gen, ver: res.ver, expire: local(res.expire), hi: local(res.hi),
		renew: local(res.renew), lifetime: res.lifetime, written: time.Now(), day: Day(res.now), mints: st.mintsToday + int64(boolArg(!res.same))}
	v.known = max(v.known, res.ver)
	v.mu.Unlock()
	if !res.same && v.ticket == "" {
		v.b.opts.Observer.TokenMinted(v.a.name)
		if co, ok := v.b.opts.Observer.(CauseObserver); ok {
			co.TokenMintedBecause(v.a.name, w.cause)
		}
	}
	if res.same {
		v.b.log.Info("token: the upstream handed out the current value again", "app", v.name, "renewed", res.renewed,
			"expires_in", time.Until(res.expire).Round(time.Millisecond).String(), "next_new_in", time.Until(res.renew).Round(time.Millisecond).String())
	}
	if time.Until(res.expire) <= v.b.opts.MinMargin && w.cause != CauseInvalid {
		return Token{}, errWait
	}
	return Token{AccessToken: got.tok.AccessToken, ExpireTime: res.expire, ver: res.ver}, nil
}

// freshWindowMS is how many milliseconds before expiry the upstream starts
// handing out a new value, or -1 when it may on any call (or may not: the
// broker cannot tell). Tickets are the latter: whether a ticket fetched
// again is a new one differs by provider and over time.
func freshWindowMS(v *value) int64 {
	if v.ticket != "" {
		return -1
	}
	if w := v.a.traits.FreshWindow; w >= 0 {
		return w.Milliseconds()
	}
	return -1
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dueIn is how long until RunRefresher should renew the value: at the
// refresh-ahead point, but not before the upstream hands out a fresher one.
func (v *value) dueIn(st state) time.Duration {
	if st.token == "" {
		return 0
	}
	due := st.expire.Add(-v.b.ahead(st.lifetime))
	if st.renew.After(due) {
		due = st.renew
	}
	return due.Sub(st.nowish())
}

// stepped reports whether Redis's clock went back since the value was
// written, so that its expiry, in the old clock, cannot be trusted.
func stepped(st state) bool {
	return st.token != "" && st.written.After(st.nowish().Add(time.Second))
}

// errorf wraps a limit's sentinel into an *Error of the value.
func (v *value) errorf(sentinel error, retry time.Duration, format string, args ...any) *Error {
	return &Error{App: v.name, Err: fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...), RetryAfter: retry}
}
