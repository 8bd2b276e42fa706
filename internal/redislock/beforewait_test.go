package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestBeforeWaitRunsOnlyForCallsThatWait: a call that gets the lock at
// once, or that does not wait, never calls BeforeWait; one that finds the
// key busy calls it once before waiting, and its error ends the call
// without leaving the call queued as a writer.
func TestBeforeWaitRunsOnlyForCallsThatWait(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Start(t).Client(t), redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	var calls, dones int
	hook := func(err error) func() (func(), error) {
		return func() (func(), error) {
			calls++
			return func() { dones++ }, err
		}
	}
	held, err := c.Acquire(ctx, redislock.Request{Key: "bw/1", Mode: redislock.Write, Owner: "a", TTL: minute, Wait: time.Second, BeforeWait: hook(nil)})
	if err != nil || !held.Acquired || calls != 0 {
		t.Fatalf("free key: %+v, %v; BeforeWait called %d times", held, err, calls)
	}
	if res, err := c.Acquire(ctx, redislock.Request{Key: "bw/1", Mode: redislock.Write, Owner: "b", TTL: minute, BeforeWait: hook(nil)}); err != nil || res.Acquired || calls != 0 {
		t.Fatalf("a try of a busy key: %+v, %v; BeforeWait called %d times", res, err, calls)
	}
	if res, err := c.Acquire(ctx, redislock.Request{Key: "bw/1", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: 50 * time.Millisecond, BeforeWait: hook(nil)}); err != nil || res.Acquired || calls != 1 || dones != 1 {
		t.Fatalf("a wait on a busy key: %+v, %v; BeforeWait called %d times, done %d", res, err, calls, dones)
	}
	refused := errors.New("too many waiters")
	if _, err := c.Acquire(ctx, redislock.Request{Key: "bw/1", Mode: redislock.Write, Owner: "b", TTL: minute, Wait: time.Minute, BeforeWait: hook(refused)}); !errors.Is(err, refused) || calls != 2 {
		t.Fatalf("a refused wait: %v; BeforeWait called %d times", err, calls)
	}
	// The refused writer is not left queued: a reader gets in once the
	// writer holding the key lets go.
	if _, err := c.Release(ctx, "bw/1", held.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Acquire(ctx, redislock.Request{Key: "bw/1", Mode: redislock.Read, Owner: "r", TTL: minute}); err != nil || !res.Acquired {
		t.Fatalf("a reader after the refused writer: %+v, %v", res, err)
	}
}
