package redislock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// TestARecordOfAnEarlierLayoutStaysHeld writes a held lock with a queued
// writer the way an earlier lockd kept it (each header number a field of
// its own, a queue place naming its attempt alone) and checks that this
// engine reads it as it was: the key stays held by its lease, others are
// refused, the lease releases, and the queue place is kept in the current
// layout.
func TestARecordOfAnEarlierLayoutStaysHeld(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := ctxT(t, 30*time.Second)
	c := newClient(t, rdb, redislock.Options{})
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const key, id, owner = "earlier/layout", "lease-of-before", "alice"
	record := "lockd:{" + key + "}"
	token := now.UnixMicro()
	expire := now.Add(time.Minute).UnixMilli()
	waiterDeadline := now.Add(30 * time.Second).UnixMilli()
	if err := rdb.HSet(ctx, record,
		"fence", token, "nl", 1, "nw", 1, "qs", 1, "due", expire, "last", expire, "w", id,
		"l:"+id, fmt.Sprintf("w|1|%d|60000|%s", token, owner),
		"x:"+id, fmt.Sprintf("%d|||", expire),
		"o:w:"+owner, id,
		"q:waiter1", fmt.Sprintf("1|%d", waiterDeadline),
		"s:1", "waiter1",
	).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpireAt(ctx, record, time.UnixMilli(expire+1000))

	res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "bob", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("bob was granted a key held under the earlier layout: %+v", res.Lease)
	}
	if res.Holder != owner {
		t.Errorf("holder %q, want %q", res.Holder, owner)
	}
	for _, old := range []string{"fence", "nl", "nw", "qs", "due", "last", "w"} {
		if n, _ := rdb.HExists(ctx, record, old).Result(); n {
			t.Errorf("field %s of the earlier layout is still there", old)
		}
	}
	if place, _ := rdb.HGet(ctx, record, "s:1").Result(); place != fmt.Sprintf("waiter1|%d", waiterDeadline) {
		t.Errorf("queue place %q, want the attempt and its deadline", place)
	}
	if n := queued(ctx, rdb, "lockd", key); n != 1 {
		t.Errorf("%d waiters queued, want 1", n)
	}
	if left, err := c.Release(ctx, key, id, ""); err != nil || left != 0 {
		t.Fatalf("release of the earlier lease: %d holds left, %v", left, err)
	}
	if h, _ := rdb.HGet(ctx, record, "h").Result(); !strings.HasPrefix(h, fmt.Sprint(token, "||1|")) {
		t.Errorf("header %q after the release, want fence %d, no lease, one waiter", h, token)
	}
}
