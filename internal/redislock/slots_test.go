package redislock

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// slotWatch is a go-redis hook that notes every script call whose keys
// lie in more than one hash slot.
type slotWatch struct {
	mu      sync.Mutex
	calls   int
	crossed []string
}

func (w *slotWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (w *slotWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.note(cmd)
		return next(ctx, cmd)
	}
}

func (w *slotWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			w.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (w *slotWatch) note(cmd redis.Cmder) {
	args := cmd.Args()
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "eval" && name != "evalsha" {
		return
	}
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	slots := map[int]bool{}
	var keys []string
	for _, k := range args[3 : 3+n] {
		key := fmt.Sprint(k)
		keys = append(keys, key)
		slots[slotOf(clusterTag(key))] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if len(slots) > 1 {
		w.crossed = append(w.crossed, strings.Join(keys, " "))
	}
}

// clusterTag is the part of key Redis Cluster hashes: the first {...} with
// something in it, or the whole key.
func clusterTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestEveryScriptTouchesOneSlot runs every kind of operation, with the
// data-loss watch on, on a single Redis, and checks that each script call
// declares keys of one hash slot only: a proxy that presents a Cluster as
// one endpoint would refuse any other call with CROSSSLOT. Key names do
// not depend on the mode (single, Sentinel, Cluster).
func TestEveryScriptTouchesOneSlot(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	w := &slotWatch{}
	rdb.AddHook(w)
	c := New(rdb, Options{DataLossGrace: time.Second, MaxRecheck: 100 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(req Request) Lease {
		t.Helper()
		res, err := c.Acquire(ctx, req)
		must(err)
		if !res.Acquired {
			t.Fatalf("%+v not acquired", req)
		}
		return res.Lease
	}
	for _, key := range []string{"slots/a", "slots/{braced}", "%percent%"} {
		w1 := acquire(Request{Key: key, Mode: Write, Owner: "o", TTL: time.Minute, RequestID: "r1"})
		acquire(Request{Key: key, Mode: Write, Owner: "o", TTL: time.Minute, RequestID: "r2"}) // a re-entry
		_, err := c.Renew(ctx, key, w1.ID, 0)
		must(err)
		// A writer waits in the queue, then gives up.
		res, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "p", TTL: time.Minute, Wait: 150 * time.Millisecond})
		must(err)
		if res.Acquired {
			t.Fatal("a second writer got in")
		}
		_, err = c.Describe(ctx, key)
		must(err)
		for _, rid := range []string{"x1", "x2"} {
			_, err = c.Release(ctx, key, w1.ID, rid)
			must(err)
		}
		// Readers, one kept alive and released on close.
		r1 := acquire(Request{Key: key, Mode: Read, Owner: "r1", TTL: time.Minute})
		acquire(Request{Key: key, Mode: Read, Owner: "r2", TTL: time.Minute})
		k := c.NewKeeper(key, r1.ID)
		kctx, kcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_ = k.KeepAlive(kctx, 0, func(Lease) error { return nil })
		kcancel()
		_, err = k.Release(ctx)
		must(err)
		_, err = c.ForceRelease(ctx, key, "")
		must(err)
		// A semaphore, and an election.
		acquire(Request{Key: key + "/sem", Mode: Permit, Limit: 2, Owner: "s", TTL: time.Minute})
		l, err := c.Campaign(ctx, CampaignRequest{Name: key + "/vote", Value: "v", TTL: time.Minute})
		must(err)
		_, err = c.Leader(ctx, key+"/vote")
		must(err)
		_, err = c.Proclaim(ctx, key+"/vote", l.LeaseID(), "w")
		must(err)
		must(c.Resign(ctx, key+"/vote", l.LeaseID()))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls < 30 {
		t.Fatalf("only %d script calls seen", w.calls)
	}
	if len(w.crossed) > 0 {
		t.Fatalf("%d of %d script calls span hash slots, e.g. %q", len(w.crossed), w.calls, w.crossed[0])
	}
}
