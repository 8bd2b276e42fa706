package redislock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// queued reads how many waiters the lock's queue counts (nw, see
// common.lua).
func queued(ctx context.Context, rdb redis.UniversalClient, prefix, key string) int {
	n, _ := strconv.Atoi(header(ctx, rdb, prefix+":{"+key+"}", headerNW))
	return n
}

// The lock record's header fields (common.lua): their places in the field h.
const (
	headerNL  = 1
	headerNW  = 2
	headerDue = 6
)

// header reads one field of the lock record's header, "" when absent.
func header(ctx context.Context, rdb redis.UniversalClient, record string, i int) string {
	h, _ := rdb.HGet(ctx, record, "h").Result()
	parts := strings.Split(h, "|")
	if i >= len(parts) {
		return ""
	}
	return parts[i]
}

// setHeader writes one field of the lock record's header.
func setHeader(ctx context.Context, rdb redis.UniversalClient, record string, i int, v string) error {
	h, err := rdb.HGet(ctx, record, "h").Result()
	if err != nil {
		return err
	}
	parts := strings.Split(h, "|")
	parts[i] = v
	return rdb.HSet(ctx, record, "h", strings.Join(parts, "|")).Err()
}

// contractWritersGoInArrivalOrder queues writers one after another on two
// engines sharing the store: the key passes from each to the next in the
// order they asked, fleet-wide. Re-checks are pushed out of the way, so
// only the message naming the head of the queue can wake each in turn.
func contractWritersGoInArrivalOrder(t *testing.T, b backend) {
	engines := []*redislock.Client{
		b.newClient(t, redislock.Options{MaxRecheck: time.Hour}),
		b.newClient(t, redislock.Options{MaxRecheck: time.Hour}),
	}
	ctx := ctxT(t, time.Minute)
	const key, writers = "fifo", 8
	h := mustAcquire(t, engines[0], redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := engines[i%len(engines)]
			res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: fmt.Sprint("w", i), TTL: time.Hour, Wait: time.Minute})
			if err != nil || !res.Acquired {
				t.Errorf("writer %d: %+v, %v", i, res, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if _, err := c.Release(ctx, key, res.Lease.ID, ""); err != nil {
				t.Errorf("writer %d release: %v", i, err)
			}
		}()
		// The next writer asks only once this one has its place.
		waitUntil(t, fmt.Sprintf("writer %d is queued", i), func() bool { return queued(ctx, b.rdb, b.prefix, key) == i+1 })
	}
	// A writer trying once does not pass the queue, even with the key
	// free between two grants; here the key is held anyway.
	mustRefuse(t, engines[1], redislock.Request{Key: key, Mode: redislock.Write, Owner: "barger", TTL: time.Hour})
	if _, err := engines[0].Release(ctx, key, h.ID, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
		t.Fatalf("writers granted in order %v, want %v", order, want)
	}
	if n := queued(ctx, b.rdb, b.prefix, key); n != 0 {
		t.Fatalf("%d waiters still queued", n)
	}
}

// contractReadersGoInTogetherAfterAWriter has readers wait behind a holder
// and a queued writer: the writer goes first (writer preference), and once
// it leaves the readers are all let in at once, woken by one message
// (re-checks are pushed out of the way).
func contractReadersGoInTogetherAfterAWriter(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{MaxRecheck: time.Hour})
	other := b.newClient(t, redislock.Options{MaxRecheck: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key, readers = "together", 3
	h := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})

	writerIn := make(chan redislock.Lease, 1)
	go func() {
		res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "writer", TTL: time.Hour, Wait: time.Minute})
		if err != nil || !res.Acquired {
			t.Errorf("writer: %+v, %v", res, err)
			close(writerIn)
			return
		}
		writerIn <- res.Lease
	}()
	waitUntil(t, "the writer is queued", func() bool { return queued(ctx, b.rdb, b.prefix, key) == 1 })

	var (
		writerHolds atomic.Bool
		early       atomic.Int64 // readers granted while the writer held
		in          sync.WaitGroup
		waiting     sync.WaitGroup
		all         = make(chan struct{})
		wg          sync.WaitGroup
	)
	in.Add(readers)
	waiting.Add(readers)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := []*redislock.Client{c, other}[i%2]
			res, err := e.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Read, Owner: fmt.Sprint("r", i), TTL: time.Hour, Wait: time.Minute,
				BeforeWait: func() (func(), error) { waiting.Done(); return func() {}, nil }})
			if err != nil || !res.Acquired {
				t.Errorf("reader %d: %+v, %v", i, res, err)
				in.Done()
				return
			}
			if writerHolds.Load() {
				early.Add(1)
			}
			in.Done()
			// Hold until every reader is in: readers one at a time
			// would never get here.
			select {
			case <-all:
			case <-ctx.Done():
				t.Errorf("reader %d: the other readers never came in", i)
			}
			if _, err := e.Release(ctx, key, res.Lease.ID, ""); err != nil {
				t.Errorf("reader %d release: %v", i, err)
			}
		}()
	}
	waiting.Wait()

	writerHolds.Store(true)
	if _, err := c.Release(ctx, key, h.ID, ""); err != nil {
		t.Fatal(err)
	}
	var w redislock.Lease
	select {
	case w = <-writerIn:
	case <-ctx.Done():
		t.Fatal("the queued writer was not granted after the holder left")
	}
	// New readers stay out while the writer holds.
	mustRefuse(t, c, redislock.Request{Key: key, Mode: redislock.Read, Owner: "late", TTL: time.Hour})
	writerHolds.Store(false)
	if _, err := c.Release(ctx, key, w.ID, ""); err != nil {
		t.Fatal(err)
	}
	in.Wait()
	close(all)
	wg.Wait()
	if early.Load() != 0 {
		t.Fatalf("%d readers granted while the writer held the key", early.Load())
	}
}

// TestDeadWaiterHoldsUpTheQueueOnlyUntilItsPlaceExpires queues a writer
// whose process then dies (its connection to Redis closes, so it never
// leaves the queue) ahead of a live one: the release wakes the dead head,
// nobody answers, and the live writer is granted once the dead one's place
// has expired, found on its own re-check.
func TestDeadWaiterHoldsUpTheQueueOnlyUntilItsPlaceExpires(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := ctxT(t, time.Minute)
	const key = "dead-head"
	live := newClient(t, rdb, redislock.Options{MaxRecheck: 100 * time.Millisecond})
	deadRdb := rs.Client(t)
	dead := newClient(t, deadRdb, redislock.Options{MaxRecheck: 200 * time.Millisecond})

	h := mustAcquire(t, live, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
	deadDone := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "dead", TTL: time.Hour, Wait: time.Minute})
		deadDone <- err
	}()
	waitUntil(t, "the doomed writer is queued", func() bool { return queued(ctx, rdb, "lockd", key) == 1 })
	got := make(chan redislock.Result, 1)
	go func() {
		res, err := live.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "live", TTL: time.Hour, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	waitUntil(t, "the live writer is queued", func() bool { return queued(ctx, rdb, "lockd", key) == 2 })

	// The head's process dies: it can neither take the key nor leave.
	_ = deadRdb.Close()
	if err := <-deadDone; err == nil {
		t.Fatal("the dead writer's Acquire ended without an error")
	}
	if _, err := live.Release(ctx, key, h.ID, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if !res.Acquired {
			t.Fatalf("live writer = %+v", res)
		}
	case <-ctx.Done():
		t.Fatal("the live writer was held up by the dead one")
	}
}

// TestLostWakeUpIsCaughtByARecheck loses the release's message (the holder
// publishes on the sharded channel, the waiters listen on the classic one):
// the queued waiter behind the head re-checks, finds the key free, and
// wakes the head again, which would otherwise wait its hour-long re-check.
func TestLostWakeUpIsCaughtByARecheck(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := ctxT(t, time.Minute)
	const key = "lost-wake"
	holder := newClient(t, rdb, redislock.Options{Sharded: true})
	head := newClient(t, rdb, redislock.Options{MaxRecheck: time.Hour})
	next := newClient(t, rdb, redislock.Options{MaxRecheck: 100 * time.Millisecond})

	h := mustAcquire(t, holder, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
	headIn := make(chan redislock.Lease, 1)
	go func() {
		res, err := head.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "head", TTL: time.Hour, Wait: time.Minute})
		if err != nil || !res.Acquired {
			t.Errorf("head: %+v, %v", res, err)
			close(headIn)
			return
		}
		headIn <- res.Lease
	}()
	waitUntil(t, "the head is queued", func() bool { return queued(ctx, rdb, "lockd", key) == 1 })
	nextIn := make(chan redislock.Result, 1)
	go func() {
		res, err := next.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "next", TTL: time.Hour, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		nextIn <- res
	}()
	waitUntil(t, "the second writer is queued", func() bool { return queued(ctx, rdb, "lockd", key) == 2 })

	if _, err := holder.Release(ctx, key, h.ID, ""); err != nil {
		t.Fatal(err)
	}
	var l redislock.Lease
	select {
	case l = <-headIn:
	case <-ctx.Done():
		t.Fatal("the head was never woken again after its wake-up was lost")
	}
	select {
	case res := <-nextIn:
		t.Fatalf("the second writer was granted before the head released: %+v", res)
	default:
	}
	if _, err := head.Release(ctx, key, l.ID, ""); err != nil {
		t.Fatal(err)
	}
	if res := <-nextIn; !res.Acquired {
		t.Fatalf("second writer = %+v", res)
	}
}

// TestIdleLockIsNotWalked shows that a call on a lock with nothing due
// (held once, now free) does not walk the whole hash: no HGETALL.
func TestIdleLockIsNotWalked(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	l := mustAcquire(t, c, redislock.Request{Key: "idle", Mode: redislock.Write, TTL: time.Minute})
	if _, err := c.Release(ctx, "idle", l.ID, ""); err != nil {
		t.Fatal(err)
	}
	before := redistest.CommandCalls(t, rdb)["hgetall"]
	l = mustAcquire(t, c, redislock.Request{Key: "idle", Mode: redislock.Write, TTL: time.Minute})
	if _, err := c.Renew(ctx, "idle", l.ID, 0); err != nil {
		t.Fatal(err)
	}
	if n := redistest.CommandCalls(t, rdb)["hgetall"] - before; n != 0 {
		t.Fatalf("%d HGETALL calls for an acquire and a renew of a lock with nothing due, want 0", n)
	}
}

// contractPermitsGoInArrivalOrder queues callers for a full semaphore on
// two engines: each permit that comes free goes to the head of the queue,
// woken alone (re-checks are pushed out of the way).
func contractPermitsGoInArrivalOrder(t *testing.T, b backend) {
	engines := []*redislock.Client{
		b.newClient(t, redislock.Options{MaxRecheck: time.Hour}),
		b.newClient(t, redislock.Options{MaxRecheck: time.Hour}),
	}
	ctx := ctxT(t, time.Minute)
	const key, waiters = "fifo-permits", 6
	first := mustAcquire(t, engines[0], permit(key, 2, "a", time.Hour))
	mustAcquire(t, engines[1], permit(key, 2, "b", time.Hour))
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := engines[i%len(engines)]
			req := permit(key, 2, fmt.Sprint("p", i), time.Hour)
			req.Wait = time.Minute
			res, err := c.Acquire(ctx, req)
			if err != nil || !res.Acquired {
				t.Errorf("waiter %d: %+v, %v", i, res, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if _, err := c.Release(ctx, key, res.Lease.ID, ""); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}()
		waitUntil(t, fmt.Sprintf("waiter %d is queued", i), func() bool { return queued(ctx, b.rdb, b.prefix, key) == i+1 })
	}
	// One permit comes free: the waiters pass it down the line in order
	// while the other stays held.
	if _, err := engines[0].Release(ctx, key, first.ID, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Fatalf("permits granted in order %v, want %v", order, want)
	}
}

// TestHandoffCostsTheSameWhateverTheQueue counts script calls while ten
// queued writers take a key in turn, each releasing it at once: after a
// release, or after the holder's lease simply runs out, only the head of
// the queue is woken and tries, with the one next in line, told to watch
// it: the whole line costs three calls a writer (its grant, its release,
// and its try as the next in line), not a try of every waiter at every
// handoff. Beyond that only the head's tries to keep its place (one per
// 300ms) and the next one's watch of it cost, for as long as they wait.
// Re-checks are pushed out of the way.
func TestHandoffCostsTheSameWhateverTheQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		release bool
	}{
		{"the holder releases", true},
		{"the holder's lease runs out", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			c := newClient(t, rdb, redislock.Options{MaxRecheck: time.Hour})
			ctx := ctxT(t, time.Minute)
			const key, writers = "line", 10
			ttl := time.Hour
			if !tc.release {
				ttl = 3 * time.Second
			}
			// Load the scripts once, so EVALSHA finds them.
			warm := mustAcquire(t, c, redislock.Request{Key: "warm", Mode: redislock.Write, TTL: time.Minute})
			if _, err := c.Release(ctx, "warm", warm.ID, ""); err != nil {
				t.Fatal(err)
			}
			h := mustAcquire(t, c, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: ttl})
			var wg sync.WaitGroup
			for i := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := c.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: fmt.Sprint("w", i), TTL: time.Hour, Wait: time.Minute})
					if err != nil || !res.Acquired {
						t.Errorf("writer %d: %+v, %v", i, res, err)
						return
					}
					if _, err := c.Release(ctx, key, res.Lease.ID, ""); err != nil {
						t.Errorf("writer %d release: %v", i, err)
					}
				}()
			}
			waitUntil(t, "every writer is queued", func() bool { return queued(ctx, rdb, "lockd", key) == writers })
			// Every waiter's re-check after subscribing is done once the
			// count stands still.
			before := scriptCalls(t, rdb)
			waitUntil(t, "the waiters settle", func() bool {
				time.Sleep(100 * time.Millisecond)
				now := scriptCalls(t, rdb)
				settled := now == before
				before = now
				return settled
			})
			start := time.Now()
			if tc.release {
				if _, err := c.Release(ctx, key, h.ID, ""); err != nil {
					t.Fatal(err)
				}
				before++ // the holder's release is not the line's
			}
			wg.Wait()
			// The head's tries to keep its place, and the next one's.
			keeping := 2 * int(time.Since(start)/(300*time.Millisecond)+1)
			if got, most := scriptCalls(t, rdb)-before, 3*writers+2+keeping; got > most {
				t.Fatalf("%d writers in line made %d script calls, want at most %d", writers, got, most)
			}
		})
	}
}

// TestWaiterOnANeverGrantedKeyLeavesNothingBehind queues a writer on a key
// never granted, while grants are held back after Redis lost its data:
// once it gives up, no count of waiters is left behind to hold readers
// back.
func TestWaiterOnANeverGrantedKeyLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := newClient(t, rdb, redislock.Options{DataLossGrace: time.Minute})
	ctx := ctxT(t, 30*time.Second)
	mustAcquire(t, c, redislock.Request{Key: "other", Mode: redislock.Write, TTL: time.Minute})
	// Redis "loses" lockd's data: grants are held back from now on.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.Acquire(ctx, redislock.Request{Key: "never", Mode: redislock.Write, TTL: time.Minute, Wait: 300 * time.Millisecond})
	if err != nil || res.Acquired {
		t.Fatalf("writer during the grace = %+v, %v", res, err)
	}
	if n := rdb.Exists(ctx, "lockd:{never}").Val(); n != 0 {
		t.Fatalf("the never-granted key's record is left behind: %v", rdb.HGetAll(ctx, "lockd:{never}").Val())
	}
}

// TestADeadHeadKeepsItsPlaceAboutASecond queues a writer at the head of
// the line, on the default re-check interval, and lets its process die:
// its place in the queue, which nobody can take back now, runs out about a
// second after its last try (HEAD_MS, 1.2s), not after the several
// re-check intervals a waiter further behind keeps its place for.
func TestADeadHeadKeepsItsPlaceAboutASecond(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := ctxT(t, time.Minute)
	const key = "dead-head/second"
	live := newClient(t, rdb, redislock.Options{})
	deadRdb := rs.Client(t)
	dead := newClient(t, deadRdb, redislock.Options{})
	mustAcquire(t, live, redislock.Request{Key: key, Mode: redislock.Write, Owner: "holder", TTL: time.Hour})
	go func() {
		_, _ = dead.Acquire(ctx, redislock.Request{Key: key, Mode: redislock.Write, Owner: "dead", TTL: time.Hour, Wait: time.Minute})
	}()
	waitUntil(t, "the doomed writer is queued", func() bool { return queued(ctx, rdb, "lockd", key) == 1 })
	_ = deadRdb.Close()
	places, err := rdb.HGetAll(ctx, "lockd:{"+key+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for field, v := range places {
		if !strings.HasPrefix(field, "q:") {
			continue
		}
		found = true
		_, deadline, _ := strings.Cut(v, "|")
		ms, err := strconv.ParseInt(deadline, 10, 64)
		if err != nil {
			t.Fatalf("place %s = %q", field, v)
		}
		if left := time.Duration(ms-now.UnixMilli()) * time.Millisecond; left > 1300*time.Millisecond {
			t.Fatalf("the head's place is kept %v on, want about a second (1.2s) at most", left)
		}
	}
	if !found {
		t.Fatalf("no place in the queue: %v", places)
	}
}
