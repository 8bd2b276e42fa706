// Package ratelimit is lockd's fleet-wide rate limiter: a generic cell rate
// algorithm (GCRA) kept in Redis and judged by Redis's clock, so that for
// any number of processes and callers, in any window of length t, at most
// burst + limit × t / period cost is allowed for a key.
//
// Each limiter is ONE Redis string (see common.lua), holding its
// theoretical arrival time in exact units (no rounding lets more through),
// its parameters, and the decisions kept for retries. A call is one script
// (take.lua: TIME, a GET or two, at most one SET), and a limiter expires
// as soon as it is full again, so idle limiters leave nothing in Redis.
//
// A caller willing to wait gets a turn: the script reserves the cost at
// the first instant it is allowed and says when; Take sleeps until then
// (no polling), so waiters are served in the order they came. A turn that
// would come after the caller's wait or deadline is refused at once. A
// caller that goes away before its turn gives it back (refund.lua) when
// nobody queued behind it; otherwise the turn goes unused, which only
// leaves the limiter stricter.
//
// With Options.DataLoss (the lock engine's data-loss markers), a Redis that
// lost its data cannot hand out a second burst: limiters count as spent
// at the loss.
//
// The package has no gRPC types and can be used as a Go library on its own.
package ratelimit

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
)

var (
	// ErrInvalidRequest is returned for a limit, period, burst or cost out
	// of range; the wrapping error names the field.
	ErrInvalidRequest = errors.New("ratelimit: invalid request")
	// ErrConflict is returned when a limiter is in use with another limit,
	// period or burst: a caller cannot widen a limit by asking for another.
	ErrConflict = errors.New("ratelimit: limiter in use with other parameters")
)

// Bounds of a limiter's parameters.
const (
	// MinPeriod is the shortest period.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest period, and the longest tolerance (burst ×
	// period / limit): a leap year.
	MaxPeriod = 366 * 24 * time.Hour
)

// DefaultReplayWindow is how long a decision is kept for the retries of
// its request id: after it was made, or after its turn for a waiter.
const DefaultReplayWindow = time.Minute

var (
	//go:embed common.lua
	commonLua string
	//go:embed take.lua
	takeLua string
	//go:embed refund.lua
	refundLua string

	takeScript   = redis.NewScript(commonLua + takeLua)
	refundScript = redis.NewScript(commonLua + refundLua)
)

// Limit is a limiter's parameters: at most Limit cost per Period, of
// which up to Burst at once.
type Limit struct {
	// Limit is how much cost is allowed per Period; at least 1.
	Limit uint32
	// Period is the span Limit applies to, in [MinPeriod, MaxPeriod];
	// whole microseconds (a fraction counts as a whole one).
	Period time.Duration
	// Burst is how much cost an idle limiter allows at once; 0 means
	// Limit. Burst × Period / Limit must not pass MaxPeriod.
	Burst uint32
}

// String describes l as "10 per 1m0s, burst 10".
func (l Limit) String() string {
	return fmt.Sprintf("%d per %v, burst %d", l.Limit, l.Period, l.burst())
}

func (l Limit) burst() uint32 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// Request asks to spend Cost from the limiter of Key.
type Request struct {
	// Key is the limiter's name; see redislock.ValidateKey.
	Key string
	// Limit are the limiter's parameters; every caller of a key must give
	// the same (ErrConflict) while the limiter is in use.
	Limit
	// Cost is what the call spends; 0 means 1. It must not pass the burst.
	Cost uint32
	// Wait is how long the call may wait for its turn; 0 decides at once.
	// The wait also ends at ctx's deadline: a turn that would come after
	// either is refused at once.
	Wait time.Duration
	// RequestID, when set, makes retries idempotent: a repeated RequestID
	// for the same key, while its decision is kept (the replay window
	// after it was made, or after its turn), gets that decision instead of
	// spending twice. Callers scope ids to their caller.
	RequestID string
	// BeforeWait, if set, is called when the call got a turn to wait for,
	// before it sleeps: callers count waiters with it. An error gives the
	// turn back and ends the call with that error; otherwise done is
	// called when the wait ends.
	BeforeWait func() (done func(), err error)
}

// Result is a limiter's decision.
type Result struct {
	// Allowed is true when the cost was spent: the caller may go ahead.
	Allowed bool
	// Remaining is how much more cost the limiter would allow at once
	// after this call.
	Remaining uint32
	// RetryAfter is, when not allowed, how long until the cost would be
	// allowed if nobody else took from the key meanwhile.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is full again if nobody
	// takes from it meanwhile.
	ResetAfter time.Duration
	// Waited is how long the call slept for its turn.
	Waited time.Duration
	// Replayed is true when the decision is that of an earlier call with
	// the same RequestID.
	Replayed bool
}

// DataLoss is where a Limiter learns that Redis lost its data: the lock
// engine's data-loss markers, which *redislock.Client provides.
type DataLoss interface {
	// Prepare creates the markers, once.
	Prepare(ctx context.Context) error
	// DataLossMarker returns the marker of the keys tagged {tag}, and the
	// grace a missing marker holds lock grants back for; "" when off.
	DataLossMarker(tag string) (string, time.Duration)
}

// Observer receives decisions for metrics. Its methods must be fast and
// safe for concurrent use.
type Observer interface {
	// Decided is called once per Take that reached a decision, with how
	// long it waited for its turn.
	Decided(allowed bool, waited time.Duration)
}

// Options tune a Limiter. The zero value is ready to use.
type Options struct {
	// Prefix starts every Redis key; default "lockd". A limiter is
	// <Prefix>:rl:{<key>}, hash-tagged like the lock of the same name
	// (redislock.HashTag), in a namespace of its own.
	Prefix string
	// DataLoss, if set, makes limiters count as spent when Redis lost its
	// data; without it, a Redis restarted empty starts every limiter full.
	DataLoss DataLoss
	// Observer, if set, is told about decisions.
	Observer Observer
	// ReplayWindow is how long decisions are kept for retries; default
	// DefaultReplayWindow.
	ReplayWindow time.Duration
}

// Limiter takes from rate limiters kept in one Redis deployment. It is
// safe for concurrent use.
type Limiter struct {
	rdb    redis.Scripter
	prefix string
	loss   DataLoss
	obs    Observer
	keep   time.Duration
}

// New returns a Limiter on rdb: a *redis.Client, a Sentinel failover
// client, a *redis.ClusterClient, or anything running scripts on them.
func New(rdb redis.Scripter, opts Options) *Limiter {
	if opts.Prefix == "" {
		opts.Prefix = "lockd"
	}
	if opts.ReplayWindow <= 0 {
		opts.ReplayWindow = DefaultReplayWindow
	}
	return &Limiter{rdb: rdb, prefix: opts.Prefix, loss: opts.DataLoss, obs: opts.Observer, keep: opts.ReplayWindow}
}

// params are a request's parameters in the script's units.
type params struct {
	limit, periodUS, burst uint64
	inc, tau               span
}

// span is q µs + r/limit µs.
type span struct{ q, r uint64 }

// check validates l and cost and returns them in the script's units.
func check(l Limit, cost uint32) (params, error) {
	burst := l.burst()
	switch {
	case l.Limit == 0:
		return params{}, fmt.Errorf("%w: limit must be at least 1", ErrInvalidRequest)
	case l.Period < MinPeriod || l.Period > MaxPeriod:
		return params{}, fmt.Errorf("%w: period must lie in [%v, %v], got %v", ErrInvalidRequest, MinPeriod, MaxPeriod, l.Period)
	case cost > burst:
		return params{}, fmt.Errorf("%w: cost %d is more than the burst %d: it could never be allowed", ErrInvalidRequest, cost, burst)
	}
	if cost == 0 {
		cost = 1
	}
	p := params{limit: uint64(l.Limit), periodUS: uint64((l.Period + time.Microsecond - 1) / time.Microsecond), burst: uint64(burst)}
	// The tolerance is at most MaxPeriod: a burst of at most a year's
	// worth of the limit keeps every instant well within 2^53 µs for Lua.
	var ok bool
	if p.tau, ok = p.times(p.burst); !ok || p.tau.q > uint64(MaxPeriod/time.Microsecond) {
		return params{}, fmt.Errorf("%w: burst × period / limit must be at most %v (burst %d, period %v, limit %d)", ErrInvalidRequest, MaxPeriod, burst, l.Period, l.Limit)
	}
	p.inc, _ = p.times(uint64(cost)) // cost <= burst
	return p, nil
}

// times returns n × period / limit, exactly; false when it passes 2^64 µs.
func (p params) times(n uint64) (span, bool) {
	hi, lo := bits.Mul64(n, p.periodUS)
	if hi >= p.limit {
		return span{}, false
	}
	q, r := bits.Div64(hi, lo, p.limit)
	return span{q: q, r: r}, true
}

// digest names a request id in Redis: fixed length, no separator, and
// no id is ever stored as given.
func digest(id string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// keys returns the limiter's Redis keys (with its slot's data-loss marker,
// when watched) and the marker's grace.
func (l *Limiter) keys(ctx context.Context, key string) ([]string, time.Duration, error) {
	tag := redislock.HashTag(key)
	name := l.prefix + ":rl:{" + tag + "}"
	if l.loss == nil {
		return []string{name}, 0, nil
	}
	if err := l.loss.Prepare(ctx); err != nil {
		return nil, 0, err
	}
	marker, grace := l.loss.DataLossMarker(tag)
	if marker == "" {
		return []string{name}, 0, nil
	}
	return []string{name, marker}, grace, nil
}

// Kinds of decision take.lua returns.
const (
	kindConflict = -1
	kindRefused  = 0
	kindAllowed  = 1
	kindTurn     = 2
	replayed     = 10
)

// Take spends req.Cost from the limiter of req.Key, or tells how long
// until it could. With req.Wait it waits for its turn when that comes
// within req.Wait and ctx's deadline. A call that ends before its turn
// (ctx canceled) gives the turn back and returns ctx's error.
func (l *Limiter) Take(ctx context.Context, req Request) (Result, error) {
	if err := redislock.ValidateKey(req.Key); err != nil {
		return Result{}, err
	}
	p, err := check(req.Limit, req.Cost)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	maxWait := max(req.Wait, 0)
	if dl, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(dl))
	}
	keys, grace, err := l.keys(ctx, req.Key)
	if err != nil {
		return Result{}, err
	}
	request := digest(req.RequestID)
	reply, err := takeScript.Run(ctx, l.rdb, keys,
		p.limit, p.periodUS, p.burst, p.inc.q, p.inc.r, p.tau.q, p.tau.r,
		max(maxWait.Microseconds(), 0), grace.Milliseconds(), request, l.keep.Microseconds()).Slice()
	if err != nil {
		return Result{}, err
	}
	kind, err := intAt(reply, 0)
	if err != nil {
		return Result{}, err
	}
	if kind == kindConflict {
		return Result{}, conflict(req.Key, reply)
	}
	if len(reply) < 8 {
		return Result{}, fmt.Errorf("ratelimit: unexpected reply %v", reply)
	}
	nums := make([]int64, 8)
	for i := range nums {
		if nums[i], err = intAt(reply, i); err != nil {
			return Result{}, err
		}
	}
	res := Result{Remaining: uint32(min(max(nums[2], 0), int64(p.burst))), ResetAfter: us(nums[4])}
	if kind >= replayed {
		res.Replayed = true
		kind -= replayed
	}
	after := us(nums[3])
	switch kind {
	case kindAllowed:
		res.Allowed = true
	case kindRefused:
		res.RetryAfter = after
	case kindTurn:
		t := turn{l: l, keys: keys, p: p, grace: grace, request: request, born: nums[5], when: nums[1] + nums[3], tatQ: nums[6], tatR: nums[7]}
		res, err = t.await(ctx, req, res, after)
		if err != nil {
			return Result{}, err
		}
	default:
		return Result{}, fmt.Errorf("ratelimit: unexpected decision %d", kind)
	}
	res.Waited = time.Since(start)
	if !res.Allowed || kind != kindTurn {
		res.Waited = 0
	}
	if l.obs != nil {
		l.obs.Decided(res.Allowed, res.Waited)
	}
	return res, nil
}

// turn is a cost reserved for a later instant.
type turn struct {
	l       *Limiter
	keys    []string
	p       params
	grace   time.Duration
	request string
	born    int64 // the limiter's life it was reserved in
	when    int64 // the turn, µs on Redis's clock
	// tatQ and tatR are the limiter's tat the turn left: it is the last
	// one while tat is still that.
	tatQ, tatR int64
}

// await sleeps until the turn (after from now, as Redis saw it when it
// answered) and answers allowed. A turn that now falls after ctx's
// deadline (the answer came late) is given back and refused at once.
func (t turn) await(ctx context.Context, req Request, res Result, after time.Duration) (Result, error) {
	if dl, ok := ctx.Deadline(); ok && time.Now().Add(after).After(dl) {
		t.refund(ctx)
		res.RetryAfter = after
		return res, nil
	}
	if req.BeforeWait != nil {
		done, err := req.BeforeWait()
		if err != nil {
			t.refund(ctx)
			return Result{}, err
		}
		defer done()
	}
	timer := time.NewTimer(after)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.refund(ctx)
		return Result{}, context.Cause(ctx)
	}
	res.Allowed = true
	res.ResetAfter = max(res.ResetAfter-after, 0)
	return res, nil
}

// refundTimeout bounds giving a turn back.
const refundTimeout = 2 * time.Second

// refund gives the turn back if it is still the last one taken (best
// effort: a turn not given back only leaves the limiter stricter).
func (t turn) refund(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	_ = refundScript.Run(rctx, t.l.rdb, t.keys,
		t.p.limit, t.p.periodUS, t.p.burst, t.p.inc.q, t.p.inc.r, t.born, t.when, t.tatQ, t.tatR, t.grace.Milliseconds(), t.request).Err()
}

// conflict describes the parameters a limiter is in use with.
func conflict(key string, reply []any) error {
	in := ""
	if len(reply) > 1 {
		in, _ = reply[1].(string)
	}
	f := strings.Split(in, ":")
	if len(f) == 3 {
		l, err1 := strconv.ParseUint(f[0], 10, 32)
		periodUS, err2 := strconv.ParseInt(f[1], 10, 64)
		b, err3 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil && err3 == nil {
			in = Limit{Limit: uint32(l), Period: time.Duration(periodUS) * time.Microsecond, Burst: uint32(b)}.String()
		}
	}
	return fmt.Errorf("%w: limiter %s is in use with %s", ErrConflict, quote(key), in)
}

// quote quotes a key for an error message, cut to a readable length.
func quote(key string) string {
	const maxShown = 64
	if len(key) > maxShown {
		cut := maxShown
		for cut > 0 && key[cut]&0xC0 == 0x80 {
			cut--
		}
		return strconv.Quote(key[:cut]) + "…"
	}
	return strconv.Quote(key)
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

func intAt(reply []any, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("ratelimit: unexpected reply %v", reply)
	}
	v, ok := reply[i].(int64)
	if !ok {
		return 0, fmt.Errorf("ratelimit: unexpected reply %v", reply)
	}
	return v, nil
}
