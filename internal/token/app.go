package token

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/upstream"
)

// app is one served app: its upstream client and keys, its access_token and
// its tickets.
type app struct {
	b       *Broker
	name    string
	client  upstream.Client
	traits  upstream.Traits // of client
	id      string          // the upstream account, see identity
	fp      string          // fingerprint of the credentials
	keys    appKeys
	token   *value
	tickets map[upstream.TicketType]*value
}

func newApp(b *Broker, cfg App, client upstream.Client, id string) *app {
	a := &app{
		b:       b,
		name:    cfg.Name,
		client:  client,
		traits:  client.Traits(),
		id:      id,
		fp:      fingerprint("credentials", cfg.Upstream),
		keys:    newAppKeys(b.opts.Prefix, id),
		tickets: map[upstream.TicketType]*value{},
	}
	a.token = newValue(a, "")
	for _, kind := range a.traits.TicketTypes {
		a.tickets[kind] = newValue(a, kind)
	}
	return a
}

// values returns the app's access_token and tickets.
func (a *app) values() []*value {
	out := []*value{a.token}
	for _, kind := range a.traits.TicketTypes {
		out = append(out, a.tickets[kind])
	}
	return out
}

// value is one cached value of an app, its access_token or a ticket, with
// the calls in flight for it in this process and the last one read.
type value struct {
	a       *app
	b       *Broker
	ticket  upstream.TicketType // "" for the access_token
	name    string              // for logs and errors: the app, or app/ticket
	keys    valueKeys
	lockKey string
	payload string // of its notices
	sig     *signal

	mu      sync.Mutex
	flights map[string]*flight
	mem     memory
	known   int64 // the newest version heard of, read or stored

	lastTouch  atomic.Int64 // local unix nanoseconds of the last demand mark
	fromMemory atomic.Bool
}

// memory is the newest value this replica read or stored, as it was then:
// served while Redis cannot be reached, the reference against which a
// Redis clock that stepped back is caught, and what is put back should
// Redis come back with older data.
type memory struct {
	token    string
	gen      int64
	ver      int64
	expire   time.Time // by the local clock
	hi       time.Time // by the local clock
	renew    time.Time // by the local clock; zero: a fresher value can be had any time
	lifetime time.Duration
	written  time.Time // by the local clock
	day      string    // the day of mints
	mints    int64     // the fleet's mints that day, as last read
}

// memoryOf is what st says, by the local clock.
func memoryOf(st state) memory {
	local := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return st.at.Add(t.Sub(st.now))
	}
	return memory{token: st.token, gen: st.gen, ver: st.ver, expire: local(st.expire), hi: local(st.hi), renew: local(st.renew),
		lifetime: st.lifetime, written: local(st.written), day: Day(st.now), mints: st.mintsToday}
}

func newValue(a *app, kind upstream.TicketType) *value {
	v := &value{
		a:       a,
		b:       a.b,
		ticket:  kind,
		name:    a.name,
		keys:    newValueKeys(a.keys, kind, a.fp),
		lockKey: a.id,
		payload: "token",
		sig:     newSignal(),
		flights: map[string]*flight{},
	}
	if kind != "" {
		v.name += "/" + string(kind)
		v.lockKey += ":ticket:" + string(kind)
		v.payload = "ticket:" + string(kind)
	}
	return v
}

// want is what a call needs from the cache.
type want struct {
	cause   Cause
	invalid string // CauseInvalid: the token the caller reported
	caller  Caller
	// confirmed is true for a report of a token this broker itself saw
	// the upstream refuse (a ticket call): no earlier verdict that it was
	// valid stands against it.
	confirmed bool
}

// reporter names the client of a report in the verdict's record, "" for
// other calls.
func (w want) reporter() string {
	if w.cause != CauseInvalid {
		return ""
	}
	return w.caller.String()
}

// key names the flight that serves w: every Get shares one, every report of
// the same token by the same client shares one.
func (w want) key() string {
	if w.cause == CauseInvalid {
		return "report:" + w.caller.Name + ":" + w.invalid
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

// errWait tells obtain to wait for the cache to change instead of minting:
// the upstream has nothing fresher to hand out yet.
var errWait = errors.New("token: nothing fresher yet")

// join runs w through the flight for it, starting one if none is under
// way, and waits for its result or ctx. The flight runs on the broker's
// context, bounded by MaxWait; when every caller has left it stops, unless
// it is minting.
func (v *value) join(ctx context.Context, w want) (Token, error) {
	key := w.key()
	v.mu.Lock()
	if v.b.ctx.Err() != nil {
		v.mu.Unlock()
		return Token{}, ErrClosed
	}
	f := v.flights[key]
	if f == nil {
		fctx, cancel := context.WithTimeout(v.b.ctx, v.b.opts.MaxWait)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		v.flights[key] = f
		go v.fly(fctx, key, f, w)
	}
	f.refs++
	v.mu.Unlock()

	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		v.mu.Lock()
		f.refs--
		if f.refs == 0 && v.flights[key] == f {
			delete(v.flights, key)
			f.cancel()
		}
		v.mu.Unlock()
		return Token{}, ctx.Err()
	}
}

func (v *value) fly(ctx context.Context, key string, f *flight, w want) {
	var tok Token
	var err error
	if w.cause == CauseInvalid {
		tok, err = v.obtainReport(ctx, w)
	} else {
		tok, err = v.obtain(ctx, w)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The flight's own bound, not a caller's deadline, ended it.
		if v.b.ctx.Err() != nil {
			err = ErrClosed
		} else {
			err = fmt.Errorf("%w for %q after %v", ErrTimeout, v.name, v.b.opts.MaxWait)
		}
	}
	v.mu.Lock()
	if v.flights[key] == f {
		delete(v.flights, key)
	}
	f.tok, f.err = tok, err
	v.mu.Unlock()
	f.cancel()
	close(f.done)
}

// obtain returns a value with enough life left: from the cache, from a mint
// of its own while holding the lock, or from another replica's mint,
// announced by a notice or found by a periodic re-check.
func (v *value) obtain(ctx context.Context, w want) (Token, error) {
	for {
		// Take the notice channel before reading: a value stored after
		// the read closes it.
		notice := v.sig.await()
		st, err := v.read(ctx, true, "")
		if err != nil {
			if tok, ok := v.remembered(""); ok {
				return tok, nil
			}
			return Token{}, err
		}
		if v.servable(st) {
			return st.result(), nil
		}
		if st.failure != nil {
			return Token{}, st.failure
		}
		wait := st.fresherIn()
		if wait <= 0 {
			tok, err, done, retry := v.tryLead(ctx, w)
			if done {
				return tok, err
			}
			wait = retry
		}
		if err := v.sleep(ctx, notice, min(wait, v.b.opts.Recheck)); err != nil {
			return Token{}, err
		}
	}
}

// tryLead takes the value's lock and leads when it is free. It is done
// unless the lock is busy (retry is then how long its holder may keep it)
// or the leader found nothing fresher to be had yet (retry 0): then the
// caller waits and looks again.
func (v *value) tryLead(ctx context.Context, w want) (tok Token, err error, done bool, retry time.Duration) {
	res, err := v.acquire(ctx)
	if err != nil {
		return Token{}, err, true, 0
	}
	if !res.Acquired {
		return Token{}, nil, false, res.RetryAfter
	}
	tok, err = v.lead(ctx, res.Lease, w)
	if errors.Is(err, errWait) {
		return Token{}, nil, false, 0
	}
	return tok, err, true, 0
}

// sleep waits for d, a notice or the end of ctx.
func (v *value) sleep(ctx context.Context, notice <-chan struct{}, d time.Duration) error {
	timer := time.NewTimer(max(d, time.Millisecond))
	defer timer.Stop()
	select {
	case <-notice:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// acquire tries once to take the lock on the value.
func (v *value) acquire(ctx context.Context) (redislock.Result, error) {
	res, err := v.b.locks.Acquire(ctx, redislock.Request{Key: v.lockKey, Mode: redislock.Write, TTL: v.b.opts.MintLockTTL})
	if err != nil {
		return res, v.redisErr(err)
	}
	return res, nil
}

// servable reports whether the cached value may be handed out: it has more
// than the margin left; or, while the upstream has nothing fresher to give
// or is failing, more than the least margin a caller needs to use it.
func (v *value) servable(st state) bool {
	left := st.left()
	switch {
	case left <= 0:
		return false
	case left > v.b.margin(st.lifetime):
		return true
	}
	return (st.fresherIn() > 0 || st.failure != nil) && left > v.b.minMargin(st.lifetime)
}

// read runs read.lua for the value, bounded by Options.RedisTimeout. With
// demand, it marks the value as asked for (at most every tenth of
// IdleAfter); with a reporter, it tells whether the last check of a
// reported token answered that client. It reconciles what it read with
// this replica's memory of the value (see recover) and reports the
// access_token's state to the observer.
func (v *value) read(ctx context.Context, demand bool, reporter string) (state, error) {
	return v.readOnce(ctx, demand, reporter, true)
}

func (v *value) readOnce(ctx context.Context, demand bool, reporter string, mayRecover bool) (state, error) {
	idle := int64(0)
	if demand && v.b.opts.IdleAfter > 0 {
		now := time.Now().UnixNano()
		every := min(v.b.opts.IdleAfter/10, time.Minute)
		if last := v.lastTouch.Load(); now-last >= int64(every) && v.lastTouch.CompareAndSwap(last, now) {
			idle = v.b.opts.IdleAfter.Milliseconds()
		}
	}
	rctx, cancel := context.WithTimeout(ctx, v.b.opts.RedisTimeout)
	defer cancel()
	// Only what was known before the read went can be older than what it
	// finds: a value stored meanwhile may be heard of before the reply.
	known := v.knownVersion()
	at := time.Now()
	k := v.keys
	reply, err := readScript.Run(rctx, v.b.rdb, []string{k.value, k.failure, k.demand, k.mints(Day(at)), k.verdict}, idle, reporter).Slice()
	if err != nil {
		if idle > 0 {
			v.lastTouch.Store(0)
		}
		if ctx.Err() == nil && rctx.Err() != nil {
			err = fmt.Errorf("no answer within %v: %w", v.b.opts.RedisTimeout, os.ErrDeadlineExceeded)
		}
		v.observe(state{}, true)
		return state{}, v.redisErr(err)
	}
	st, err := readState(reply, v.name, at)
	if err != nil {
		return state{}, err
	}
	if v.b.opts.IdleAfter < 0 {
		st.demand = true
	}
	if behind := v.reconcile(&st, known); behind {
		if st, err = v.recover(ctx, st, demand, reporter, mayRecover); err != nil {
			return state{}, err
		}
	}
	v.observe(st, false)
	return st, nil
}

// clockStepTolerance is how far later than before a value read again may
// seem to expire before it counts as Redis's clock stepping back, rather
// than round trips of different lengths.
const clockStepTolerance = 2 * time.Second

// reconcile compares what Redis holds with this replica's memory. A
// value older than the newest this replica knew of before the read (by
// version) means Redis came back with older data, or lost it: reconcile
// reports it and leaves the rest to recover. For the value it read before, it keeps the earlier
// of the expiries it was told: should Redis's clock step back, the value
// would otherwise seem to gain life. Otherwise it remembers the value.
func (v *value) reconcile(st *state, known int64) (behind bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.ver < known {
		return true
	}
	if st.token == "" {
		return false
	}
	if v.mem.token == st.token && v.mem.ver == st.ver {
		local := st.at.Add(st.expire.Sub(st.now))
		if shift := local.Sub(v.mem.expire); shift > clockStepTolerance {
			st.expire = st.expire.Add(-shift)
			st.hi = st.hi.Add(-shift)
			if !st.renew.IsZero() {
				st.renew = st.renew.Add(-shift)
			}
			if st.written.After(st.now) {
				st.written = st.now
			}
			return false
		}
	}
	v.mem = memoryOf(*st)
	v.known = max(v.known, st.ver)
	return false
}

// heard records a version a notice announced.
func (v *value) heard(ver int64) {
	v.mu.Lock()
	v.known = max(v.known, ver)
	v.mu.Unlock()
}

// knownVersion is the newest version this replica heard of.
func (v *value) knownVersion() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return max(v.known, v.mem.ver)
}

// recover answers a read that found an older value than this replica
// knows (Redis restarted from a snapshot, failed over to a lagging
// replica, was restored, or lost its data): the older value is never
// served. When this replica remembers the newest value and it is still
// good, it puts it back (one replica wins; the others find it on their
// next read); otherwise the read reports no value, so that one replica
// mints its successor.
func (v *value) recover(ctx context.Context, st state, demand bool, reporter string, mayRecover bool) (state, error) {
	v.mu.Lock()
	m, known := v.mem, max(v.known, v.mem.ver)
	v.mu.Unlock()
	now := time.Now()
	usable := m.token != "" && m.ver == known && m.expire.Sub(now) > v.b.minMargin(m.lifetime)
	if usable && mayRecover {
		renewIn := int64(-1)
		if !m.renew.IsZero() {
			renewIn = max(m.renew.Sub(now).Milliseconds(), 0)
		}
		mints := int64(0)
		if m.day == Day(st.nowish()) {
			mints = m.mints
		}
		k := v.keys
		reply, err := restoreScript.Run(ctx, v.b.rdb, []string{k.value, k.mints(Day(st.nowish()))},
			m.token, m.ver, m.expire.Sub(now).Milliseconds(), max(m.hi.Sub(now), m.expire.Sub(now)).Milliseconds(), renewIn,
			m.lifetime.Milliseconds(), max(now.Sub(m.written), 0).Milliseconds(), keepAfterExpiry.Milliseconds(),
			mints, counterTTL.Milliseconds(), v.a.keys.channel, v.b.publish, v.payload).Slice()
		if err != nil {
			return state{}, v.redisErr(err)
		}
		restored, _ := reply[0].(int64)
		v.b.log.Warn("token: Redis holds an older value than this replica saw (restored from a snapshot, a lagging replica, or emptied); putting back the newest",
			"app", v.name, "version_found", st.ver, "version_known", known, "restored_here", restored == 1)
		// Read what is cached now: the value put back, or a newer one.
		return v.readOnce(ctx, demand, reporter, false)
	}
	if mayRecover {
		// One more look: a newer value may have been stored since.
		return v.readOnce(ctx, demand, reporter, false)
	}
	if st.token != "" {
		v.b.log.Warn("token: Redis holds an older value than this replica saw, and it knows no good one to put back; replacing it",
			"app", v.name, "version_found", st.ver, "version_known", known)
	}
	st.token, st.expire, st.hi, st.renew, st.lifetime = "", time.Time{}, time.Time{}, time.Time{}, 0
	return st, nil
}

// remembered returns the last value this replica read while it has more
// than the least margin left, unless it is the one reported invalid or a
// notice announced a newer one (which the fleet may have served): what is
// served while Redis cannot be reached.
func (v *value) remembered(invalid string) (Token, bool) {
	v.mu.Lock()
	m, known := v.mem, v.known
	v.mu.Unlock()
	if m.token == "" || m.token == invalid || m.ver < known || time.Until(m.expire) <= v.b.opts.MinMargin {
		return Token{}, false
	}
	if !v.fromMemory.Swap(true) {
		v.b.log.Warn("token: Redis cannot be reached; serving the last token read from memory while it is valid",
			"app", v.name, "expires_in", time.Until(m.expire).Round(time.Second).String())
	}
	v.observe(state{}, true)
	return Token{AccessToken: m.token, ExpireTime: m.expire.Round(0), ver: m.ver}, true
}

// observe reports the access_token's state after a read (st zero when
// Redis could not be read).
func (v *value) observe(st state, failed bool) {
	if !failed && v.fromMemory.Swap(false) {
		v.b.log.Info("token: Redis answers again; no longer serving from memory", "app", v.name)
	}
	so, ok := v.b.opts.Observer.(StateObserver)
	if !ok || v.ticket != "" {
		return
	}
	if failed {
		v.mu.Lock()
		m := v.mem
		v.mu.Unlock()
		var expire time.Time
		if time.Until(m.expire) > 0 {
			expire = m.expire
		}
		so.TokenState(v.a.name, expire, -1, -1, v.fromMemory.Load())
		return
	}
	var expire time.Time
	if left := st.left(); left > 0 {
		expire = st.at.Add(st.expire.Sub(st.now))
	}
	so.TokenState(v.a.name, expire, st.mintsToday, st.attempts, false)
}

// redisErr names the value on a Redis error, keeping context errors as they
// are so that deadlines pass through.
func (v *value) redisErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("token: %q: redis: %w", v.name, err)
}
