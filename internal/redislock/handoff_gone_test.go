package redislock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A waiter that gives up is never left holding the key a release hands it:
// the next caller finds the key free as soon as the release has answered.
// The client libraries send a request id with every Acquire, which keeps
// an ordinary grant whose caller went away for the request's retry; a key
// handed to a waiter that had gone must not be kept that way.

// TestAReleaseRightAfterTheWaiterGaveUpLeavesTheKeyFree ends the waiter's
// call and releases the key at once, as a client does that aborts a
// waiting Acquire while another releases the key: the release gets to the
// waiter's offer before the waiter has withdrawn it. Once the waiter has
// answered, the key is free for anyone.
func TestAReleaseRightAfterTheWaiterGaveUpLeavesTheKeyFree(t *testing.T) {
	t.Parallel()
	c, _, _ := handoffClient(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		key := fmt.Sprintf("handoff-gave-up-%d", i)
		first := holdKey(ctx, t, c, key)
		wctx, wcancel := context.WithCancel(ctx)
		second := acquireAsync(wctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute,
			Wait: 20 * time.Second, RequestID: fmt.Sprintf("second-%d", i)})
		offered(t, c, key)
		wcancel()
		if _, err := c.Release(ctx, key, first.Lease.ID, ""); err != nil {
			t.Fatal(err)
		}
		if got := <-second; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled Acquire = %+v, %v; want context.Canceled", got.res, got.err)
		}
		third, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "third", TTL: time.Minute})
		if err != nil || !third.Acquired {
			d, _ := c.Describe(ctx, key)
			t.Fatalf("round %d: Acquire of the released key = %+v, %v; want it free, found %+v", i, third, err, d)
		}
		if _, err := c.Release(ctx, key, third.Lease.ID, ""); err != nil {
			t.Fatal(err)
		}
		leftNothing(t, c, key)
	}
}

// TestAReleaseGivesBackTheKeyOfAWaiterGoneMeanwhile has the waiter's call
// end after a release took its offer and before that release got to
// Redis, and holds back the waiter's own leaving of the queue: the release
// hands it the key all the same, and gives it back before it answers, so
// the key is free for the next caller as soon as the release has answered.
func TestAReleaseGivesBackTheKeyOfAWaiterGoneMeanwhile(t *testing.T) {
	t.Parallel()
	for _, requestID := range []string{"", "second-request"} {
		t.Run(fmt.Sprintf("request_id=%q", requestID), func(t *testing.T) {
			t.Parallel()
			c, rdb, _ := handoffClient(t, Options{})
			gate := newReleaseGate(false)
			rdb.AddHook(gate)
			leaving := &queueLeaveGate{let: make(chan struct{})}
			rdb.AddHook(leaving)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "handoff-gone-" + requestID
			first := holdKey(ctx, t, c, key)
			wctx, wcancel := context.WithCancel(ctx)
			second := acquireAsync(wctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute,
				Wait: 20 * time.Second, RequestID: requestID})
			offered(t, c, key)
			released := releaseAsync(ctx, c, key, first.Lease.ID)
			<-gate.held
			wcancel()
			time.Sleep(20 * time.Millisecond) // the waiter sees its call end
			close(gate.let)
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			third, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "third", TTL: time.Minute})
			close(leaving.let)
			if err != nil || !third.Acquired {
				d, _ := c.Describe(ctx, key)
				t.Fatalf("Acquire of the key just released = %+v, %v; want it free, found %+v", third, err, d)
			}
			if got := <-second; !errors.Is(got.err, context.Canceled) {
				t.Fatalf("cancelled Acquire = %+v, %v; want context.Canceled", got.res, got.err)
			}
			if _, err := c.Release(ctx, key, third.Lease.ID, ""); err != nil {
				t.Fatal(err)
			}
			leftNothing(t, c, key)
		})
	}
}

// queueLeaveGate holds back every abandon.lua that only leaves the queue
// (a waiter's own leaving as its call ends) until let is closed or its
// call ends.
type queueLeaveGate struct{ let chan struct{} }

func (g *queueLeaveGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *queueLeaveGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 3 && (args[1] == abandonScript.hash || args[1] == abandonScript.src) {
			n, _ := args[2].(int)
			if len(args) > 3+n+3 && args[3+n+3] == "0" {
				select {
				case <-g.let:
				case <-ctx.Done():
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (g *queueLeaveGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
