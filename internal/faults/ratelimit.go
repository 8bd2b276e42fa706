package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Rate limits. Clients take from a few limiters (RateLimitService.Take)
// through the replicas, some deciding at once, some waiting for their
// turn, retrying a call that failed on the next replica with the same
// request_id as lockd's clients do. Every decision is recorded as a
// [RateEvent]; [CheckRate] holds the history to the contract: in any
// window of length t, at most burst + limit × t / period cost allowed per
// key.

// Rate is a limiter's parameters.
type Rate struct {
	Limit  uint32
	Period time.Duration
	Burst  uint32 // 0: Limit
}

func (r Rate) burst() uint32 {
	if r.Burst == 0 {
		return r.Limit
	}
	return r.Burst
}

// bound is the most cost the contract allows in a window of length d.
func (r Rate) bound(d time.Duration) float64 {
	return float64(r.burst()) + float64(r.Limit)*d.Seconds()/r.Period.Seconds()
}

// RateEvent is one Take as its caller saw it: from its first attempt's
// call to its last attempt's return (a retry may replay a decision made
// by an earlier attempt).
type RateEvent struct {
	Client  int
	Key     string
	Cost    int
	Waited  bool // the call was willing to wait for its turn
	Call    time.Time
	Return  time.Time
	Allowed bool
	Err     string // every attempt failed: the last one's gRPC code
	Retries int    // attempts that failed before the last one
}

// RateHistory records rate events from many goroutines.
type RateHistory struct {
	mu     sync.Mutex
	events []RateEvent
}

// Add records an event.
func (h *RateHistory) Add(e RateEvent) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// Events returns the events recorded so far, by call time.
func (h *RateHistory) Events() []RateEvent {
	h.mu.Lock()
	out := append([]RateEvent(nil), h.events...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call.Before(out[j].Call) })
	return out
}

// Taker decides takes: lockd's RateLimitService on one replica, or
// another limiter for a negative control.
type Taker interface {
	// Take spends cost from key's limiter, waiting up to wait for its
	// turn; requestID is the same for every attempt of one take.
	Take(ctx context.Context, key string, rate Rate, cost int, wait time.Duration, requestID string) (allowed bool, retryAfter time.Duration, err error)
}

// LockdTakers returns a Taker for each replica's RateLimitService.
func LockdTakers(replicas []lockdv1.RateLimitServiceClient) []Taker {
	out := make([]Taker, len(replicas))
	for i, r := range replicas {
		out[i] = lockdTaker{r}
	}
	return out
}

type lockdTaker struct {
	c lockdv1.RateLimitServiceClient
}

func (t lockdTaker) Take(ctx context.Context, key string, rate Rate, cost int, wait time.Duration, requestID string) (bool, time.Duration, error) {
	res, err := t.c.Take(ctx, &lockdv1.TakeRequest{
		Key: key, Limit: rate.Limit, Period: durationpb.New(rate.Period), Burst: rate.Burst,
		Cost: uint32(cost), WaitTimeout: durationpb.New(wait), RequestId: requestID,
	})
	return res.GetAllowed(), res.GetRetryAfter().AsDuration(), err
}

// FixedWindow is the limiter many services write by hand, for a negative
// control: a counter per calendar window of the period (INCRBY, expiring
// with its window), allowing while the count stays within the limit. It
// keeps to the limit per window, but not to the contract: around each
// window's edge it allows the limit twice within moments. It does not
// wait.
type FixedWindow struct {
	RDB redis.UniversalClient
}

// Take spends cost from key's window counter.
func (f FixedWindow) Take(ctx context.Context, key string, rate Rate, cost int, _ time.Duration, _ string) (bool, time.Duration, error) {
	now := time.Now()
	window := now.Truncate(rate.Period)
	counter := "fixedwindow:{" + key + "}:" + strconv.FormatInt(window.UnixMilli(), 10)
	pipe := f.RDB.TxPipeline()
	n := pipe.IncrBy(ctx, counter, int64(cost))
	pipe.PExpireAt(ctx, counter, window.Add(rate.Period))
	if _, err := pipe.Exec(ctx); err != nil {
		return false, 0, err
	}
	if n.Val() > int64(rate.Limit) {
		return false, window.Add(rate.Period).Sub(now), nil
	}
	return true, 0, nil
}

// RateWorkload is what the clients of a rate run do: each, in a loop,
// takes a random cost (1 to MaxCost, at most the burst) from one of the
// limiters; every other client waits up to Wait for its turn, the rest
// decide at once. A refused client pauses a little before it asks again.
type RateWorkload struct {
	Rates   map[string]Rate
	Clients int
	MaxCost int
	Wait    time.Duration
}

// RateRun is one run of a rate workload against takers (one per replica),
// with its history.
type RateRun struct {
	History RateHistory

	w         RateWorkload
	keys      []string
	takers    []Taker
	ctx       context.Context
	cancel    context.CancelFunc
	stopping  atomic.Bool
	paused    atomic.Bool
	wg        sync.WaitGroup
	decisions atomic.Int64
	progress  chan struct{}
}

// NewRateRun returns a run of w on takers; nothing happens until Start.
func NewRateRun(w RateWorkload, takers []Taker) *RateRun {
	ctx, cancel := context.WithCancel(context.Background())
	keys := make([]string, 0, len(w.Rates))
	for k := range w.Rates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return &RateRun{w: w, keys: keys, takers: takers, ctx: ctx, cancel: cancel, progress: make(chan struct{}, 1)}
}

// Start starts the clients, client i on taker i (mod the takers) first.
func (r *RateRun) Start() {
	for id := range r.w.Clients {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.loop(id)
		}()
	}
}

// Stop asks the clients to finish their calls and waits for them.
func (r *RateRun) Stop() {
	r.stopping.Store(true)
	r.wg.Wait()
	r.cancel()
}

// Pause holds the clients back from new takes until Resume: the limiters
// fill up again.
func (r *RateRun) Pause() { r.paused.Store(true) }

// Resume lets the clients take again.
func (r *RateRun) Resume() { r.paused.Store(false) }

// Decisions returns how many takes were decided (allowed or refused).
func (r *RateRun) Decisions() int64 { return r.decisions.Load() }

// WaitDecisions waits until n takes were decided in all, and reports
// false if timeout passed first: for moving a scenario on once the run
// made progress, never an assertion on speed.
func (r *RateRun) WaitDecisions(n int64, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for r.decisions.Load() < n {
		select {
		case <-r.progress:
		case <-deadline:
			return false
		}
	}
	return true
}

// rateAttempts is how often a take is tried, on the next replica each time.
const rateAttempts = 3

func (r *RateRun) loop(id int) {
	rnd := rand.New(rand.NewPCG(uint64(id), 13))
	cur := id % len(r.takers)
	for !r.stopping.Load() {
		if r.paused.Load() {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		key := r.keys[rnd.IntN(len(r.keys))]
		rate := r.w.Rates[key]
		cost := 1 + rnd.IntN(max(1, min(r.w.MaxCost, int(rate.burst()))))
		var wait time.Duration
		if id%2 == 0 {
			wait = r.w.Wait
		}
		e := RateEvent{Client: id, Key: key, Cost: cost, Waited: wait > 0, Call: time.Now()}
		reqID := newID()
		var retry time.Duration
		for range rateAttempts {
			ctx, cancel := context.WithTimeout(r.ctx, wait+3*time.Second)
			allowed, after, err := r.takers[cur].Take(ctx, key, rate, cost, wait, reqID)
			cancel()
			e.Return = time.Now()
			if err != nil {
				e.Err = status.Code(err).String()
				e.Retries++
				if status.Code(err) == codes.Canceled && r.ctx.Err() != nil {
					break
				}
				cur = (cur + 1) % len(r.takers)
				time.Sleep(retryBackoff)
				continue
			}
			e.Err, e.Allowed, retry = "", allowed, after
			break
		}
		if e.Err != "" {
			e.Retries-- // the last attempt failed too: not a retry
		}
		r.History.Add(e)
		if e.Err != "" {
			continue
		}
		r.decisions.Add(1)
		select {
		case r.progress <- struct{}{}:
		default:
		}
		if !e.Allowed {
			time.Sleep(min(retry/2, 20*time.Millisecond) + time.Duration(rnd.IntN(3))*time.Millisecond)
		}
	}
}

// RateResult is what [CheckRate] found in a rate history.
type RateResult struct {
	Decisions, Allowed, Failed int
	// Retried counts attempts that failed and were tried again.
	Retried int
	// Windows counts the windows checked.
	Windows int
	// Peak is the highest share of the bound one window's allowed cost
	// reached: near 1, the run pressed the limit; above 1, a violation.
	Peak float64
	// OverLimit are windows in which more cost was allowed than the
	// contract allows: the first few per key, then how many more.
	OverLimit []string
}

// Violations returns every violation found.
func (r *RateResult) Violations() []string { return r.OverLimit }

// AsResult is r as a row of the fault report: allowed takes as holds,
// windows over the limit as grants beyond it.
func (r *RateResult) AsResult() *Result {
	return &Result{Holds: r.Allowed, Calls: r.Decisions + r.Failed, FailedCalls: r.Failed, OverLimit: r.OverLimit}
}

// maxReported bounds the violations listed per key.
const maxReported = 10

// CheckRate checks a rate history against rates: for every window [a, b]
// of the run, the cost of the takes allowed certainly within it is at most
// burst + limit × (b - a) / period for their key. A take was decided (or
// its turn came) at some instant of Redis's clock between its call and
// its return; skew bounds how far the recorder's clock may be from
// Redis's, so a take is certainly within [a, b] when [call - skew,
// return + skew] is. Windows run from one take's widened call to
// another's widened return: every window where a violation could show.
func CheckRate(events []RateEvent, rates map[string]Rate, skew time.Duration) *RateResult {
	r := &RateResult{}
	byKey := map[string][]RateEvent{}
	for _, e := range events {
		r.Retried += e.Retries
		switch {
		case e.Err != "":
			r.Failed++
		case e.Allowed:
			r.Decisions++
			r.Allowed++
			byKey[e.Key] = append(byKey[e.Key], e)
		default:
			r.Decisions++
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		checkKey(r, key, byKey[key], rates[key], skew)
	}
	return r
}

// allowedSpan is one allowed take, widened by the skew.
type allowedSpan struct {
	from, to time.Time
	cost     int
}

// checkKey checks the allowed takes of one key. For each window start a
// (a take's widened call, latest first), the takes starting at or after a
// are kept sorted by their widened return; the first k of them end by the
// k-th return b, and their cost must stay within the bound of [a, b].
func checkKey(r *RateResult, key string, allowed []RateEvent, rate Rate, skew time.Duration) {
	spans := make([]allowedSpan, len(allowed))
	for i, e := range allowed {
		spans[i] = allowedSpan{from: e.Call.Add(-skew), to: e.Return.Add(skew), cost: e.Cost}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from.Before(spans[j].from) })
	var byEnd []allowedSpan // spans[i:], sorted by to
	over := 0
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		at := sort.Search(len(byEnd), func(j int) bool { return byEnd[j].to.After(s.to) })
		byEnd = append(byEnd, allowedSpan{})
		copy(byEnd[at+1:], byEnd[at:])
		byEnd[at] = s
		if i > 0 && spans[i-1].from.Equal(s.from) {
			continue // the window from here holds spans[i-1] too
		}
		a, sum := s.from, 0
		for _, e := range byEnd {
			sum += e.cost
			r.Windows++
			bound := rate.bound(e.to.Sub(a))
			if share := float64(sum) / bound; share > r.Peak {
				r.Peak = share
			}
			if float64(sum) <= bound {
				continue
			}
			over++
			if over <= maxReported {
				r.OverLimit = append(r.OverLimit, fmt.Sprintf(
					"key %q (%d per %v, burst %d): cost %d allowed in [%s, %s] (%v), bound %.2f",
					shortKey(key), rate.Limit, rate.Period, rate.burst(), sum, stamp(a), stamp(e.to), e.to.Sub(a), bound))
			}
		}
	}
	if over > maxReported {
		r.OverLimit = append(r.OverLimit, fmt.Sprintf("key %q: … and %d more windows over the limit", shortKey(key), over-maxReported))
	}
}

// MeasureSkew bounds how far rdb's clock (TIME) is from the local one: the
// most any of a few readings fell outside the local instants around it,
// plus a millisecond for rounding.
func MeasureSkew(ctx context.Context, rdb redis.UniversalClient) (time.Duration, error) {
	var worst time.Duration
	for range 5 {
		before := time.Now()
		t, err := rdb.Time(ctx).Result()
		after := time.Now()
		if err != nil {
			return 0, err
		}
		worst = max(worst, before.Sub(t), t.Sub(after))
	}
	return worst + time.Millisecond, nil
}
