package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestAHeadWhoseSubscriptionIsNotConfirmedKeepsItsPlace waits at the head
// of a queue on a Redis that never confirms its subscription (the user may
// not subscribe, and Redis refuses the subscription as when a slot just
// moved and it went to the node that had it): with re-checks an hour
// apart, the waiter must still go on trying within the head's place
// (HEAD_MS), and take the key soon after it is released, rather than wait
// for a confirmation that never comes.
func TestAHeadWhoseSubscriptionIsNotConfirmedKeepsItsPlace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := ctxT(t, 30*time.Second)
	if err := admin.Do(ctx, "ACL", "SETUSER", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe", "-ssubscribe").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "nosub", Password: "pw"})
	t.Cleanup(func() { rdb.Close() })
	c := newClient(t, rdb, redislock.Options{MaxRecheck: time.Hour})

	holder := mustAcquire(t, c, redislock.Request{Key: "unconfirmed", Mode: redislock.Write, Owner: "a", TTL: time.Minute})
	type outcome struct {
		res redislock.Result
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: "unconfirmed", Mode: redislock.Write, Owner: "b",
			TTL: time.Minute, Wait: 20 * time.Second})
		got <- outcome{res, err}
	}()
	// Longer than the head's place lasts without a try (HEAD_MS, 1.2s).
	time.Sleep(3 * time.Second)
	if _, err := c.Release(ctx, "unconfirmed", holder.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.err != nil || !o.res.Acquired {
			t.Fatalf("the waiter was not granted the key: %+v, %v", o.res, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was still waiting 5s after the key was released")
	}
}
