package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

// contractRetriesReplayTheirFirstResult: a request id replays the first
// result unchanged, to the same owner and mode only.
func contractRetriesReplayTheirFirstResult(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	first := mustAcquire(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "1"})
	mustAcquire(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "2"})
	again := mustAcquire(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "a", TTL: minute, RequestID: "1"})
	if again.ID != first.ID || again.HoldCount != 1 || again.FencingToken != first.FencingToken {
		t.Fatalf("replay = %+v, first %+v", again, first)
	}
	mustRefuse(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, TTL: minute, RequestID: "1"})
	mustRefuse(t, c, redislock.Request{Key: "replay", Mode: redislock.Write, Owner: "b", TTL: minute, RequestID: "1"})
}

// contractKeeperReleasesTheWholeLeaseOnlyIfNewest: a Keeper's Release ends
// every hold of the lease, unless a newer Keeper has taken over.
func contractKeeperReleasesTheWholeLeaseOnlyIfNewest(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	req := redislock.Request{Key: "kept", Mode: redislock.Write, Owner: "a", TTL: minute}
	mustAcquire(t, c, req)
	l := mustAcquire(t, c, req)
	keep := func(k *redislock.Keeper) {
		kctx, stop := context.WithCancel(ctx)
		defer stop()
		_ = k.KeepAlive(kctx, 0, func(redislock.Lease) error {
			stop() // one renewal registers the keeper
			return nil
		})
	}
	old, newer := c.NewKeeper("kept", l.ID), c.NewKeeper("kept", l.ID)
	keep(old)
	keep(newer)
	if released, err := old.Release(ctx); err != nil || released {
		t.Fatalf("stale keeper's Release = %v, %v; want false", released, err)
	}
	mustRefuse(t, c, redislock.Request{Key: "kept", Mode: redislock.Write, Owner: "b", TTL: minute})
	if released, err := newer.Release(ctx); err != nil || !released {
		t.Fatalf("newest keeper's Release = %v, %v", released, err)
	}
	mustAcquire(t, c, redislock.Request{Key: "kept", Mode: redislock.Write, Owner: "b", TTL: minute})
}

// contractInconsistentRecordIsLost damages held locks' records in ways no
// lockd script leaves them: each lock is then treated as lost — NOT_FOUND
// to its holder, free for others with a higher fencing token — never as
// held by two.
func contractInconsistentRecordIsLost(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 20*time.Second)
	damages := map[string]func(record, leaseID string) error{
		"a lease that does not decode": func(record, id string) error {
			return b.rdb.HSet(ctx, record, "l:"+id, "garbage").Err()
		},
		"a holder count that is not a number": func(record, _ string) error {
			return setHeader(ctx, b.rdb, record, headerNL, "many")
		},
		"a write holder without its lease": func(record, id string) error {
			return b.rdb.HDel(ctx, record, "l:"+id).Err()
		},
		"a holder count of zero beside a write holder": func(record, _ string) error {
			return setHeader(ctx, b.rdb, record, headerNL, "0")
		},
		"an owner pointing at no lease": func(record, _ string) error {
			if err := b.rdb.HSet(ctx, record, "o:w:ghost", "nothing").Err(); err != nil {
				return err
			}
			return setHeader(ctx, b.rdb, record, headerDue, "1")
		},
		"a lone lease that does not decode": func(record, _ string) error {
			return b.rdb.Set(ctx, record, "w1|garbage", minute).Err()
		},
	}
	for name, damage := range damages {
		key := "damaged/" + name
		l := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "a", TTL: minute})
		// A lone lease is kept as a string; the owner's second hold makes
		// the record the hash these damages are done to.
		mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "a", TTL: minute})
		if err := damage(b.prefix+":{"+key+"}", l.ID); err != nil {
			t.Fatal(err)
		}
		next, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "b", TTL: minute})
		if err != nil {
			t.Fatalf("%s: Acquire: %v", name, err)
		}
		_, renewErr := c.Renew(ctx, key, l.ID, 0)
		if next.Acquired && renewErr == nil {
			t.Fatalf("%s: granted to a second writer while the first still renews", name)
		}
		if !errors.Is(renewErr, redislock.ErrNotHeld) {
			t.Fatalf("%s: the holder's Renew = %v, want ErrNotHeld", name, renewErr)
		}
		if !next.Acquired {
			next.Lease = mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "b", TTL: minute})
		}
		if next.Lease.FencingToken <= l.FencingToken {
			t.Fatalf("%s: token %d after %d", name, next.Lease.FencingToken, l.FencingToken)
		}
	}
}
