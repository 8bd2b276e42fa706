package token

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/upstream"
)

// The kinds of a limited verdict, as stored.
const (
	limitedForce = "force"
	limitedApp   = "app"
)

// obtainReport answers a report of w.invalid. A stale report, or one of a
// token that needs replacing anyway, is served like Get. A report of the
// current token is answered from the fleet's verdict on it when there is a
// recent one; else it is charged to the caller and checked with the
// upstream under the lock, and the token replaced only if the upstream
// refuses it.
func (v *value) obtainReport(ctx context.Context, w want) (Token, error) {
	charged := false
	for {
		notice := v.sig.await()
		st, err := v.read(ctx, true, w.reporter())
		if err != nil {
			if tok, ok := v.remembered(w.invalid); ok {
				return tok, nil
			}
			return Token{}, err
		}
		if st.token != w.invalid || !v.servable(st) {
			return v.obtain(ctx, want{cause: CauseDemand, caller: w.caller})
		}
		if tok, err, ok := v.decided(st, w); ok {
			return tok, err
		}
		if !charged {
			if err := v.charge(ctx, w); err != nil {
				return Token{}, err
			}
			charged = true
		}
		tok, err, done, retry := v.tryLead(ctx, w)
		if done {
			return tok, err
		}
		if err := v.sleep(ctx, notice, min(retry, v.b.opts.Recheck)); err != nil {
			return Token{}, err
		}
	}
}

// decided answers a report of the cached token from the fleet's verdict on
// it: accepted by the upstream lately (see trust), or not replaceable until
// a limit ends. The upstream's word that a token is valid answers only
// reports of the clients whose reports it checked: another client's report
// is checked again at once, since a token that died is reported by every
// client using it, and a client looping on a valid token is one client.
// Nor does it answer a report of a refusal this broker saw itself.
func (v *value) decided(st state, w want) (Token, error, bool) {
	vd := st.verdict
	if vd.hash != tokenHash(w.invalid) {
		return Token{}, nil, false
	}
	now := v.b.opts.Now()
	switch {
	case vd.kind == verdictValid && !w.confirmed && st.reporterKnown && now.Sub(vd.at) < v.trust(vd.count):
		return st.result(), nil, true
	case strings.HasPrefix(vd.kind, verdictLimited) && now.Before(vd.until):
		sentinel := ErrRefreshLimited
		if vd.kind == verdictLimited+":"+limitedApp {
			sentinel = ErrAppRefreshLimited
		}
		var cause error = errors.New(vd.why)
		if vd.errcode != 0 {
			cause = &upstream.Error{Provider: v.a.client.Provider(), Class: upstream.ClassQuota, Errcode: vd.errcode, Errmsg: vd.why, Endpoint: v.a.client.Endpoint()}
		}
		return Token{}, &Error{App: v.name, Err: fmt.Errorf("%w: %w", sentinel, cause), RetryAfter: vd.until.Sub(now), Recorded: true}, true
	}
	return Token{}, nil, false
}

// trust is how long the fleet takes the upstream's word that a reported
// token is valid after it said so count times in a row: a second at first,
// so that a token revoked after one report is replaced at once on the next,
// doubling up to VerifyInterval, so that a client reporting a valid token
// in a loop costs at most one check per VerifyInterval.
func (v *value) trust(count int) time.Duration {
	return min(time.Second<<min(max(count-1, 0), 20), v.b.opts.VerifyInterval)
}

// window is the index of the refresh limits' current window, and how long
// it has left.
func (v *value) window() (int64, time.Duration) {
	now := v.b.opts.Now()
	w := v.b.opts.RefreshWindow
	i := now.UnixNano() / int64(w)
	return i, time.Unix(0, (i+1)*int64(w)).Sub(now)
}

// charge takes one report from the caller's budget for the window, unless
// it was charged for this token already.
func (v *value) charge(ctx context.Context, w want) error {
	limit := w.caller.RefreshesPerHour
	switch {
	case limit < 0:
		return nil
	case limit == 0:
		limit = DefaultRefreshesPerHour
	}
	i, left := v.window()
	name := w.caller.String()
	k := v.a.keys
	reply, err := takeScript.Run(ctx, v.b.rdb, []string{k.client(name, i), k.charged(name, tokenHash(w.invalid))},
		limit, (2 * v.b.opts.RefreshWindow).Milliseconds()).Slice()
	if err != nil {
		return v.redisErr(err)
	}
	if ok, _ := reply[0].(int64); ok == 1 {
		return nil
	}
	v.b.log.Warn("token: client reached its refresh limit", "app", v.name, "client", name, "limit", limit,
		"window", v.b.opts.RefreshWindow.String())
	return v.errorf(ErrClientLimited, left, "client %q reported %d current tokens within %v", name, limit, v.b.opts.RefreshWindow)
}

// leadReport checks a report of the cached token with the upstream, under
// the lock, and replaces the token only if the upstream refuses it.
func (v *value) leadReport(ctx context.Context, st state, w want) (Token, error) {
	if st.token != w.invalid || !v.servable(st) {
		return Token{}, errWait // it changed meanwhile; look again
	}
	if _, _, ok := v.decided(st, w); ok {
		return Token{}, errWait
	}
	client := v.a.client
	if !v.a.traits.Probe {
		return v.leadReportByFetch(ctx, st, w)
	}
	if v.a.traits.ForceRefresh {
		// The stable API: another system sharing the appid may have
		// replaced the token, and normal mode hands out its successor.
		got, err := v.fetch(ctx, w, false)
		if err != nil {
			return v.mintFailed(ctx, st, w, err)
		}
		tok, err := v.store(ctx, st, got, w, false)
		if err != nil || tok.AccessToken != w.invalid {
			return tok, err
		}
		if st, err = v.read(ctx, false, w.reporter()); err != nil {
			return Token{}, err
		}
	}
	ok, err := client.Probe(ctx, w.invalid)
	switch {
	case err == nil && ok:
		v.trusted(ctx, st, w)
		v.b.log.Info("token: the upstream still accepts the reported token; not replaced", "app", v.name, "client", w.caller.String())
		return st.result(), nil
	case err != nil && ctx.Err() != nil:
		return Token{}, err
	case err != nil:
		v.upstreamFailed(ctx, w, "check of the reported token", err)
		v.b.log.Warn("token: could not check the reported token; replacing it within the limits", "app", v.name, "client", w.caller.String())
	}
	if err := v.takeAppBudget(ctx, w); err != nil {
		return Token{}, err
	}
	force := v.a.traits.ForceRefresh
	if force {
		if lim, err := v.allowForce(ctx, w, st.nowish()); lim != nil || err != nil {
			if lim != nil {
				return Token{}, lim
			}
			return Token{}, err
		}
	}
	got, err := v.fetch(ctx, w, force)
	if err != nil {
		var we *upstream.Error
		if force && errors.As(err, &we) && we.Class == upstream.ClassQuota {
			// WeChat refused the force_refresh itself.
			retry := v.hold(we, 1, st.nowish())
			v.setVerdict(ctx, w.invalid, verdict{kind: verdictLimited + ":" + limitedForce, until: v.b.opts.Now().Add(retry), why: we.Errmsg, errcode: we.Errcode}, "")
			return Token{}, &Error{App: v.name, Err: fmt.Errorf("%w: %w", ErrRefreshLimited, err), RetryAfter: retry}
		}
		return v.mintFailed(ctx, st, w, err)
	}
	tok, err := v.store(ctx, st, got, w, force)
	if err == nil {
		v.b.log.Info("token: replaced a token the upstream refuses", "app", v.name, "client", w.caller.String(),
			"same", tok.AccessToken == w.invalid)
	}
	return tok, err
}

// leadReportByFetch checks a report with an upstream that cannot be asked
// whether it accepts a token (Feishu, DingTalk, OAuth2) by asking it for
// its current token, within the app's budget of report-caused mints: a
// token it hands out again is the one it accepts; any other replaces the
// reported one.
func (v *value) leadReportByFetch(ctx context.Context, st state, w want) (Token, error) {
	if err := v.takeAppBudget(ctx, w); err != nil {
		return Token{}, err
	}
	got, err := v.fetch(ctx, w, false)
	if err != nil {
		return v.mintFailed(ctx, st, w, err)
	}
	tok, err := v.store(ctx, st, got, w, false)
	switch {
	case err != nil:
		return tok, err
	case tok.AccessToken == w.invalid:
		v.trusted(ctx, st, w)
		v.b.log.Info("token: the upstream hands out the reported token as its current one; not replaced", "app", v.name, "client", w.caller.String())
	default:
		v.b.log.Info("token: replaced a reported token", "app", v.name, "client", w.caller.String())
	}
	return tok, nil
}

// trusted records that the upstream accepts the reported token once more,
// for the reporting client.
func (v *value) trusted(ctx context.Context, st state, w want) {
	count := 1
	if vd := st.verdict; vd.hash == tokenHash(w.invalid) && vd.kind == verdictValid {
		count = vd.count + 1
	}
	v.setVerdict(ctx, w.invalid, verdict{kind: verdictValid, count: count}, w.reporter())
}

// takeAppBudget takes one mint from the app's budget of report-caused
// mints for the window, or records that reports cannot mint until it ends.
func (v *value) takeAppBudget(ctx context.Context, w want) error {
	limit := v.b.opts.AppRefreshesPerHour
	if limit == 0 {
		return nil
	}
	i, left := v.window()
	reply, err := takeScript.Run(ctx, v.b.rdb, []string{v.a.keys.reports(i)}, limit, (2 * v.b.opts.RefreshWindow).Milliseconds()).Slice()
	if err != nil {
		return v.redisErr(err)
	}
	if ok, _ := reply[0].(int64); ok == 1 {
		return nil
	}
	why := fmt.Sprintf("reports minted %d tokens within %v", limit, v.b.opts.RefreshWindow)
	v.setVerdict(ctx, w.invalid, verdict{kind: verdictLimited + ":" + limitedApp, until: v.b.opts.Now().Add(left), why: why}, "")
	v.b.log.Warn("token: the app reached its refresh limit", "app", v.name, "client", w.caller.String(), "limit", limit)
	return v.errorf(ErrAppRefreshLimited, left, "%s", why)
}

// allowForce takes a force_refresh from the app's budget, or records and
// returns why not.
func (v *value) allowForce(ctx context.Context, w want, now time.Time) (*Error, error) {
	o := v.b.opts
	reply, err := forceScript.Run(ctx, v.b.rdb, []string{v.a.keys.forces(Day(now)), v.a.keys.forceGate()},
		o.ForceRefreshPerDay, o.ForceRefreshInterval.Milliseconds(), counterTTL.Milliseconds()).Slice()
	if err != nil {
		return nil, v.redisErr(err)
	}
	ok, why, wait, err := parseForce(reply, now, o.ForceRefreshPerDay)
	if err != nil || ok {
		return nil, err
	}
	v.setVerdict(ctx, w.invalid, verdict{kind: verdictLimited + ":" + limitedForce, until: o.Now().Add(wait), why: why}, "")
	v.b.log.Warn("token: force_refresh not allowed now", "app", v.name, "client", w.caller.String(), "reason", why, "retry_after", wait.String())
	return v.errorf(ErrRefreshLimited, wait, "%s", why), nil
}

// setVerdict records the fleet's verdict on tok (by a digest of it) at the
// broker's clock, and wakes the reporters waiting for it. A verdict that
// tok is valid again keeps the clients the earlier one answered and adds
// reporter. A failure to record it only costs a later check again.
func (v *value) setVerdict(ctx context.Context, tok string, vd verdict, reporter string) {
	now := v.b.opts.Now()
	ttl := v.b.opts.VerifyInterval
	if !vd.until.IsZero() {
		ttl = max(ttl, vd.until.Sub(now))
	}
	if ttl <= 0 {
		return
	}
	again := vd.kind == verdictValid && vd.count > 1
	_, err := v.b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if !again {
			p.Del(ctx, v.keys.verdict)
		}
		fields := []any{"hash", tokenHash(tok), "kind", vd.kind, "at_ms", now.UnixMilli(),
			"until_ms", vd.until.UnixMilli(), "why", vd.why, "errcode", vd.errcode, "count", vd.count}
		if reporter != "" {
			fields = append(fields, "r:"+reporter, 1)
		}
		p.HSet(ctx, v.keys.verdict, fields...)
		p.PExpire(ctx, v.keys.verdict, ttl+time.Second)
		p.Do(ctx, v.b.publish, v.a.keys.channel, v.payload)
		return nil
	})
	if err != nil {
		v.b.log.Warn("token: recording the verdict on a reported token", "app", v.name, "err", err)
	}
}
