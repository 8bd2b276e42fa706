package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/ratelimit"
	"github.com/lockd/lockd/internal/redislock"
)

func contractBurstThenRate(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 60, Period: time.Hour, Burst: 5} // one a minute
	for want := 4; want >= 0; want-- {
		res := take(t, l, ratelimit.Request{Key: "k", Limit: lim})
		if !res.Allowed || int(res.Remaining) != want {
			t.Fatalf("take %d of the burst: %+v, want allowed with %d remaining", 5-want, res, want)
		}
		if res.ResetAfter <= 0 || res.ResetAfter > time.Duration(5-want)*time.Minute {
			t.Errorf("reset_after %v after %d of 5", res.ResetAfter, 5-want)
		}
	}
	res := take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	if res.Allowed || res.Remaining != 0 {
		t.Fatalf("sixth take of a burst of 5: %+v, want refused", res)
	}
	// One more is allowed a minute (period / limit) after the first, less
	// what has passed since; the limiter is full 4 minutes after that.
	if res.RetryAfter <= 0 || res.RetryAfter > time.Minute {
		t.Errorf("retry_after %v, want in (0, 1m]", res.RetryAfter)
	}
	if res.ResetAfter-res.RetryAfter != 4*time.Minute {
		t.Errorf("reset_after %v, retry_after %v: want 4m apart", res.ResetAfter, res.RetryAfter)
	}

	// After retry_after (by Redis's clock: the embedded store's moves in
	// steps), the cost is allowed.
	fast := ratelimit.Limit{Limit: 10, Period: time.Second, Burst: 1}
	take(t, l, ratelimit.Request{Key: "fast", Limit: fast})
	for i := 0; ; i++ {
		res := take(t, l, ratelimit.Request{Key: "fast", Limit: fast})
		if res.Allowed {
			break
		}
		if res.RetryAfter <= 0 || res.RetryAfter > 100*time.Millisecond || i == 100 {
			t.Fatalf("refused with retry_after %v (try %d)", res.RetryAfter, i)
		}
		time.Sleep(res.RetryAfter)
	}
}

func contractCostSpendsMore(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 5, Period: time.Hour}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, Cost: 3}); !res.Allowed || res.Remaining != 2 {
		t.Fatalf("cost 3 of 5: %+v", res)
	}
	res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, Cost: 3})
	if res.Allowed {
		t.Fatalf("cost 3 with 2 left: %+v", res)
	}
	// 1 more unit comes back every 12 minutes.
	if res.RetryAfter <= 11*time.Minute || res.RetryAfter > 12*time.Minute {
		t.Errorf("retry_after %v, want about 12m", res.RetryAfter)
	}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, Cost: 2}); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("cost 2 with 2 left: %+v", res)
	}
}

func contractInvalidRequests(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	ok := ratelimit.Limit{Limit: 10, Period: time.Second}
	for _, tc := range []struct {
		name string
		req  ratelimit.Request
		want error
		says string
	}{
		{"an empty key", ratelimit.Request{Limit: ok}, redislock.ErrInvalidKey, "key"},
		{"a key with a control character", ratelimit.Request{Key: "a\nb", Limit: ok}, redislock.ErrInvalidKey, "control"},
		{"a zero limit", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Period: time.Second}}, ratelimit.ErrInvalidRequest, "limit"},
		{"no period", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 1}}, ratelimit.ErrInvalidRequest, "period"},
		{"a period under a millisecond", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 1, Period: time.Microsecond}}, ratelimit.ErrInvalidRequest, "period"},
		{"a period over a leap year", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 1, Period: ratelimit.MaxPeriod + time.Second}}, ratelimit.ErrInvalidRequest, "period"},
		{"a cost over the burst", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 10, Period: time.Second, Burst: 3}, Cost: 4}, ratelimit.ErrInvalidRequest, "cost"},
		{"a burst worth over a year", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 1, Period: ratelimit.MaxPeriod, Burst: 2}}, ratelimit.ErrInvalidRequest, "burst"},
		{"a burst whose product passes 64 bits", ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 1, Period: ratelimit.MaxPeriod, Burst: 1 << 31}}, ratelimit.ErrInvalidRequest, "burst"},
	} {
		_, err := l.Take(ctxT(t, 10*time.Second), tc.req)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.says)
		}
	}
	// The largest values that are allowed work.
	for _, lim := range []ratelimit.Limit{
		{Limit: 1<<32 - 1, Period: ratelimit.MaxPeriod, Burst: 1<<32 - 1},
		{Limit: 1<<32 - 1, Period: ratelimit.MinPeriod},
		{Limit: 1, Period: ratelimit.MaxPeriod},
	} {
		if res := take(t, l, ratelimit.Request{Key: "edge/" + lim.String(), Limit: lim, Cost: lim.Burst}); !res.Allowed {
			t.Errorf("%v: %+v", lim, res)
		}
	}
}

func contractConflictingParameters(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 10, Period: time.Hour}
	take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	for _, other := range []ratelimit.Limit{
		{Limit: 20, Period: time.Hour},
		{Limit: 10, Period: time.Minute},
		{Limit: 10, Period: time.Hour, Burst: 20},
	} {
		_, err := l.Take(ctxT(t, 10*time.Second), ratelimit.Request{Key: "k", Limit: other})
		if !errors.Is(err, ratelimit.ErrConflict) || !strings.Contains(err.Error(), "10 per 1h0m0s, burst 10") {
			t.Errorf("%v on a limiter in use with %v: %v, want ErrConflict naming the limit in use", other, lim, err)
		}
	}
	// The same parameters spelled out (burst = limit) are the same.
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: ratelimit.Limit{Limit: 10, Period: time.Hour, Burst: 10}}); !res.Allowed {
		t.Errorf("burst spelled out: %+v", res)
	}
	// Once a limiter is full again, new parameters take over.
	short := ratelimit.Limit{Limit: 10, Period: 100 * time.Millisecond}
	first := take(t, l, ratelimit.Request{Key: "short", Limit: short, Cost: 10})
	time.Sleep(first.ResetAfter + 10*time.Millisecond)
	// The store's clock may lag the host's a little (the embedded store's
	// when starved of CPU): until it too sees the limiter full, the old
	// parameters stand.
	other := ratelimit.Limit{Limit: 20, Period: 100 * time.Millisecond}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := l.Take(ctxT(t, 10*time.Second), ratelimit.Request{Key: "short", Limit: other})
		if errors.Is(err, ratelimit.ErrConflict) && time.Now().Before(deadline) {
			continue
		}
		if err != nil || !res.Allowed || res.Remaining != 19 {
			t.Errorf("new parameters once full: %+v, %v", res, err)
		}
		break
	}
}

func contractNothingLeftBehind(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 5, Period: 5 * time.Second}
	ctx := ctxT(t, 30*time.Second)
	for i := range 3 {
		take(t, l, ratelimit.Request{Key: "k", Limit: lim})
		take(t, l, ratelimit.Request{Key: "other", Limit: lim, RequestID: "r" + string(rune('0'+i))})
	}
	ks, err := b.keys(ctx)
	if err != nil || len(ks) != 2 {
		t.Fatalf("keys after takes: %v, %v; want 2 limiters", ks, err)
	}
	for _, k := range ks {
		ttl, err := b.rdb.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > ratelimit.DefaultReplayWindow+time.Second {
			t.Errorf("%s: pttl %v, %v", k, ttl, err)
		}
	}
	if ttl := b.rdb.PTTL(ctx, b.key("k")).Val(); ttl > 3*time.Second {
		t.Errorf("a limiter without kept decisions lives %v, longer than until it is full", ttl)
	}
	// With the real clock (also on the embedded store) the limiter without
	// kept decisions is gone once full.
	deadline := time.Now().Add(20 * time.Second)
	for b.rdb.Exists(ctx, b.key("k")).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatalf("limiter still in Redis long after it was full: pttl %v", b.rdb.PTTL(ctx, b.key("k")).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contractRefusalWritesNothing(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 1, Period: time.Hour}
	ctx := ctxT(t, 30*time.Second)
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); !res.Allowed {
		t.Fatal(res)
	}
	before := b.rdb.Get(ctx, b.key("k")).Val()
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); res.Allowed {
		t.Fatal(res)
	}
	if after := b.rdb.Get(ctx, b.key("k")).Val(); after != before {
		t.Errorf("a refusal changed the limiter: %q -> %q", before, after)
	}
}

func contractRetriesReplayTheirDecision(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 3, Period: time.Hour}
	first := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "a"})
	again := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "a"})
	if !first.Allowed || first.Replayed || !again.Allowed || !again.Replayed || again.Remaining != first.Remaining {
		t.Fatalf("retry: %+v then %+v", first, again)
	}
	// The retry spent nothing: two more are left.
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "b"}); !res.Allowed || res.Remaining != 1 || res.Replayed {
		t.Fatalf("another request: %+v", res)
	}
	take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	refused := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "c"})
	if refused.Allowed {
		t.Fatalf("fourth of 3: %+v", refused)
	}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "c"}); res.Allowed || !res.Replayed || res.RetryAfter <= 0 {
		t.Fatalf("retry of a refusal: %+v", res)
	}
	// The first decision still replays, also after other requests.
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "a"}); !res.Allowed || !res.Replayed {
		t.Fatalf("retry after others: %+v", res)
	}
}

func contractKeptDecisionsAreBounded(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 1000, Period: time.Hour}
	for i := range 40 {
		take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: fmt.Sprint("r", i)})
	}
	if v := b.rdb.Get(ctxT(t, 10*time.Second), b.key("k")).Val(); len(v) > 1700 {
		t.Errorf("the limiter keeps %d bytes after 40 requests", len(v))
	}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "r39"}); !res.Replayed || res.Remaining != 1000-40 {
		t.Errorf("the newest request: %+v, want its decision replayed", res)
	}
	// The oldest decisions made room: a retry that late spends again
	// (more than the limit is never allowed: it only counts twice).
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, RequestID: "r0"}); res.Replayed || res.Remaining != 1000-41 {
		t.Errorf("the oldest request: %+v, want a new decision", res)
	}
}

func contractWaitForTurn(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 20, Period: time.Minute, Burst: 1} // a turn every 3s
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); !res.Allowed {
		t.Fatal(res)
	}
	res := take(t, l, ratelimit.Request{Key: "k", Limit: lim, Wait: 10 * time.Second})
	if !res.Allowed || res.Waited <= 0 || res.Remaining != 0 {
		t.Fatalf("waiting for the next turn: %+v", res)
	}
	// A turn after the wait is refused at once.
	res = take(t, l, ratelimit.Request{Key: "k", Limit: lim, Wait: time.Millisecond})
	if res.Allowed || res.Waited != 0 || res.RetryAfter <= time.Millisecond {
		t.Fatalf("a turn beyond the wait: %+v", res)
	}
	// So is one after the deadline, without waiting for it.
	slow := ratelimit.Limit{Limit: 1, Period: time.Hour}
	take(t, l, ratelimit.Request{Key: "slow", Limit: slow})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := l.Take(ctx, ratelimit.Request{Key: "slow", Limit: slow, Wait: 2 * time.Hour})
	if err != nil || res.Allowed || res.RetryAfter < 59*time.Minute || ctx.Err() != nil {
		t.Fatalf("a turn beyond the deadline: %+v, %v (context %v)", res, err, ctx.Err())
	}
}

func contractWaitersGoInOrder(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 120, Period: time.Minute, Burst: 1} // a turn every 500ms
	take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	const n = 5
	done := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		reserved := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.Take(ctxT(t, 30*time.Second), ratelimit.Request{Key: "k", Limit: lim, Wait: 20 * time.Second,
				BeforeWait: func() (func(), error) { close(reserved); return func() {}, nil }})
			if err != nil || !res.Allowed {
				t.Errorf("waiter %d: %+v, %v", i, res, err)
			}
			done <- i
		}()
		// The next comes once this one has its turn.
		select {
		case <-reserved:
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d got no turn", i)
		}
	}
	wg.Wait()
	close(done)
	want := 0
	for i := range done {
		if i != want {
			t.Errorf("waiter %d went %d-th", i, want)
		}
		want++
	}
}

// turnProbe returns how long until a cost of 1 would be allowed (a refusal
// writes nothing).
func turnProbe(t *testing.T, l *ratelimit.Limiter, lim ratelimit.Limit) time.Duration {
	t.Helper()
	res := take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	if res.Allowed {
		t.Fatalf("probe allowed: %+v", res)
	}
	return res.RetryAfter
}

func contractOnlyTheLastTurnIsGivenBack(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 60, Period: time.Hour, Burst: 1} // a turn a minute
	take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	wait := func() (cancel func() error) {
		ctx, stop := context.WithCancel(context.Background())
		reserved := make(chan struct{})
		ended := make(chan error, 1)
		go func() {
			_, err := l.Take(ctx, ratelimit.Request{Key: "k", Limit: lim, Wait: time.Hour,
				BeforeWait: func() (func(), error) { close(reserved); return func() {}, nil }})
			ended <- err
		}()
		<-reserved
		return func() error { stop(); return <-ended }
	}
	cancelA := wait() // turn in 1 minute
	cancelB := wait() // turn in 2 minutes
	if got := turnProbe(t, l, lim); got <= 2*time.Minute || got > 3*time.Minute {
		t.Fatalf("with two turns taken the next is in %v, want about 3m", got)
	}
	// A has B behind it: its turn is not given back.
	if err := cancelA(); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	if got := turnProbe(t, l, lim); got <= 2*time.Minute {
		t.Fatalf("a turn with another behind it was given back: next in %v", got)
	}
	// B is the last: its turn comes back.
	if err := cancelB(); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	if got := turnProbe(t, l, lim); got <= time.Minute || got > 2*time.Minute {
		t.Fatalf("after the last turn was given back the next is in %v, want about 2m", got)
	}
}

func contractRetryClaimsItsTurn(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 60, Period: time.Hour, Burst: 1}
	take(t, l, ratelimit.Request{Key: "k", Limit: lim})
	// The first call takes a turn, then its caller retries (say, on
	// another replica) with the same request id: the retry waits for the
	// same turn, and the first call going away no longer gives it back.
	ctx, stop := context.WithCancel(context.Background())
	reserved := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		_, err := l.Take(ctx, ratelimit.Request{Key: "k", Limit: lim, Wait: time.Hour, RequestID: "r",
			BeforeWait: func() (func(), error) { close(reserved); return func() {}, nil }})
		ended <- err
	}()
	<-reserved
	retried := make(chan struct{})
	rctx, rstop := context.WithCancel(context.Background())
	defer rstop()
	go func() {
		_, _ = l.Take(rctx, ratelimit.Request{Key: "k", Limit: lim, Wait: time.Hour, RequestID: "r",
			BeforeWait: func() (func(), error) { close(retried); return func() {}, nil }})
	}()
	<-retried
	next := turnProbe(t, l, lim)
	stop()
	<-ended
	if got := turnProbe(t, l, lim); got < next-time.Second {
		t.Fatalf("the first call gave back a turn its retry claimed: next turn %v, was %v", got, next)
	}
	if next <= time.Minute || next > 2*time.Minute {
		t.Fatalf("the retry took a second turn: next in %v", next)
	}
}

func contractManyCallersNeverExceedTheLimit(t *testing.T, b backend) {
	lim := ratelimit.Limit{Limit: 40, Period: 200 * time.Millisecond, Burst: 10}
	limiters := []*ratelimit.Limiter{b.limiter(t, ratelimit.Options{}), b.limiter(t, ratelimit.Options{}), b.limiter(t, ratelimit.Options{})}
	for _, l := range limiters {
		// Made ready (data-loss markers) before the clock starts.
		take(t, l, ratelimit.Request{Key: "warm-up", Limit: lim})
	}
	var allowed, refused atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[i%len(limiters)]
			for time.Since(start) < time.Second {
				var wait time.Duration
				if i%3 == 0 {
					wait = 50 * time.Millisecond
				}
				res, err := l.Take(ctxT(t, 30*time.Second), ratelimit.Request{Key: "k", Limit: lim, Wait: wait})
				switch {
				case err != nil:
					t.Error(err)
					return
				case res.Allowed:
					allowed.Add(1)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Every decision fell within [start, start+elapsed].
	bound := float64(lim.Burst) + float64(lim.Limit)*elapsed.Seconds()/lim.Period.Seconds()
	if float64(allowed.Load()) > bound {
		t.Errorf("%d allowed in %v, more than burst + limit × t / period = %.1f", allowed.Load(), elapsed, bound)
	}
	if refused.Load() == 0 || allowed.Load() <= int64(lim.Burst) {
		t.Errorf("%d allowed, %d refused: the callers did not press the limit", allowed.Load(), refused.Load())
	}
}

func contractUnreadableValueCountsAsSpent(t *testing.T, b backend) {
	l := b.limiter(t, ratelimit.Options{})
	lim := ratelimit.Limit{Limit: 1, Period: time.Hour, Burst: 5}
	ctx := ctxT(t, 10*time.Second)
	if err := b.rdb.Set(ctx, b.key("k"), "not a limiter", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if res := take(t, l, ratelimit.Request{Key: "k", Limit: lim}); res.Allowed {
		t.Fatalf("a value no script wrote gave a burst: %+v", res)
	}
}
