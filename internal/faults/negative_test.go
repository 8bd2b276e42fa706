package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockd/lockd/internal/redistest"
)

// TestNegativeFencingIgnored is the paused-client run against a resource
// that ignores fencing tokens: the paused client's stale write is accepted
// after a newer holder's, and the checker must say so.
func TestNegativeFencingIgnored(t *testing.T) {
	t.Parallel()
	res := pausedRun(t, "control: fencing ignored", true)
	if len(res.OutOfOrder) == 0 {
		t.Errorf("the checker found no write accepted out of fencing order; violations: %q", res.Violations())
	}
	if res.FencedLinearizable == "Ok" {
		t.Errorf("porcupine found the fenced resource's history linearizable although it accepted a stale write")
	}
}

// TestNegativeUnseenDataLoss loses one lock's data in a way lockd cannot
// see (its Redis keys vanish while the rest of Redis, and any marker of
// it, stays, as on a failover to a replica that had not yet received these
// writes) while its holder keeps it alive with Renew calls, and lets a
// contender take the key at once. The contract does not cover this; the
// checker must report the double grant.
func TestNegativeUnseenDataLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second

	run := NewRun(Workload{}, f.replicas)
	holder := run.NewClient(0, 0, "holder", f.replicas)
	contender := run.NewClient(1, 1, "contender", f.replicas)
	for round := range scaled(1, 3) {
		key := fmt.Sprintf("unseen/%d", round)
		h, err := holder.Acquire(ctx, key, AcquireOptions{TTL: ttl})
		if err != nil || h == nil {
			t.Fatalf("holder: %v, %v", h, err)
		}
		if !h.Renew(ctx) {
			t.Fatal("lost at once")
		}
		// The holder is mid-write when its lock's keys vanish and the
		// contender takes the key and writes too.
		var c *Held
		h.Write(ctx, time.Millisecond, func() {
			tag := "lockd:{" + key + "}"
			if err := rdb.Del(ctx, tag, tag+":holders", tag+":writers").Err(); err != nil {
				t.Fatal(err)
			}
			for c == nil {
				if c, err = contender.Acquire(ctx, key, AcquireOptions{TTL: ttl}); err != nil {
					t.Fatal(err)
				}
			}
			c.Write(ctx, time.Millisecond, nil)
		})
		_, _ = c.Release(ctx, true)
		if h.Renew(ctx) {
			t.Fatal("the holder's lease survived the loss of its keys")
		}
	}
	res := run.Check()
	writeHistory(t, run, len(res.Violations()) > 0)
	report.Add("control: unseen data loss", "one lock's Redis keys deleted under its holder, who renews by Renew (a loss lockd cannot see)", res, true)
	if len(res.DoubleGrants) == 0 || len(res.OverlapViolations) == 0 {
		t.Errorf("the checker missed the double grant or the overlap: %q", res.Violations())
	}
	if res.LockLinearizable != porcupine.Illegal {
		t.Errorf("porcupine's lock model found the history %v although the key was granted twice", res.LockLinearizable)
	}
}
