package redislock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stuckBound is how long a test lets a waiter take to answer once its wait
// is over, while a release that took its offer is still on its way. A
// waiter that answers on its own needs a moment (its bounded try to leave
// the queue, unwaitTry); this is a bound for a hang, not a speed check.
const stuckBound = 10 * time.Second

// TestAWaiterPastItsWaitIsNotHeldByAReleaseOnItsWay has the waiter's wait
// end while a release of this process that took its offer is still on its
// way to Redis (held back here; in production a release's call lasts up to
// its own RPC deadline or the client's read timeout, indefinitely for a
// client without one). The waiter must answer when its wait is over (SPEC:
// the call waits up to min(wait_timeout, RPC deadline)), not when another
// caller's call comes back.
func TestAWaiterPastItsWaitIsNotHeldByAReleaseOnItsWay(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{})
	gate := newReleaseGate(false)
	rdb.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "handoff-stuck-wait"
	first := holdKey(ctx, t, c, key)
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 300 * time.Millisecond})
	offered(t, c, key)
	released := releaseAsync(ctx, c, key, first.Lease.ID)
	<-gate.held
	select {
	case got := <-second:
		close(gate.let)
		if got.err != nil || got.res.Acquired {
			t.Errorf("Acquire past its wait = %+v, %v; want not acquired", got.res, got.err)
		}
	case <-time.After(stuckBound):
		close(gate.let)
		got := <-second
		t.Fatalf("Acquire with a 300ms wait still waiting %v after it began, until another caller's release came back (then answered %+v, %v)",
			stuckBound, got.res, got.err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	leftNothing(t, c, key)
}

// leftNothing waits until no Redis key of the lock is left.
func leftNothing(t *testing.T, c *Client, key string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n, _ := c.rdb.Exists(ctx, c.keys(key).record).Result(); n == 0 {
			return
		}
		if time.Now().After(deadline) {
			d, _ := c.Describe(ctx, key)
			t.Fatalf("left behind: %+v", d)
		}
	}
}

// TestAWaiterWhoseCallEndsIsNotHeldByAReleaseOnItsWay cancels the waiter's
// call while a release of this process that took its offer is still on its
// way: the call must end when its caller goes away, not when another
// caller's release comes back; whatever that release may grant it is
// another matter (given back by the release, handoff_gone_test.go).
func TestAWaiterWhoseCallEndsIsNotHeldByAReleaseOnItsWay(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{})
	gate := newReleaseGate(false)
	rdb.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "handoff-stuck-cancel"
	first := holdKey(ctx, t, c, key)
	wctx, wcancel := context.WithCancel(ctx)
	second := acquireAsync(wctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 30 * time.Second})
	offered(t, c, key)
	released := releaseAsync(ctx, c, key, first.Lease.ID)
	<-gate.held
	wcancel()
	select {
	case got := <-second:
		close(gate.let)
		if !errors.Is(got.err, context.Canceled) {
			t.Errorf("cancelled Acquire = %+v, %v; want context.Canceled", got.res, got.err)
		}
	case <-time.After(stuckBound):
		close(gate.let)
		got := <-second
		t.Fatalf("Acquire still running %v after its caller went away, until another caller's release came back (then answered %+v, %v)",
			stuckBound, got.res, got.err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	// Nothing is left behind: a grant the release made is given back.
	leftNothing(t, c, key)
}
