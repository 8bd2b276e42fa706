package redislock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// scriptCount counts the lock scripts a go-redis client runs (an EVALSHA
// answered NOSCRIPT, followed by its EVAL, does not count).
type scriptCount struct{ n atomic.Int64 }

func (s *scriptCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && !isNoScript(err) {
			s.n.Add(1)
		}
		return err
	}
}

func (s *scriptCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// offered waits until a writer of c waits at the head of key's queue with
// its acquire offered to c's releases.
func offered(t *testing.T, c *Client, key string) {
	t.Helper()
	record := c.keys(key).record
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.offers.mu.Lock()
		o := c.offers.m[record]
		c.offers.mu.Unlock()
		if o != nil && o.state.Load() == offerOpen {
			return
		}
	}
	t.Fatalf("no writer waiting at the head of %q offered its acquire", key)
}

type acquired struct {
	res Result
	err error
}

func acquireAsync(ctx context.Context, c *Client, req Request) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		res, err := c.Acquire(ctx, req)
		done <- acquired{res, err}
	}()
	return done
}

// holdKey has owner "first" take key, a writer's lease of a minute.
func holdKey(ctx context.Context, t *testing.T, c *Client, key string) Result {
	t.Helper()
	first, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "first", TTL: time.Minute})
	if err != nil || !first.Acquired {
		t.Fatalf("first Acquire = %+v, %v", first, err)
	}
	return first
}

// releaseAsync releases the lease leaseID of key, answering on the channel.
func releaseAsync(ctx context.Context, c *Client, key, leaseID string) <-chan error {
	released := make(chan error, 1)
	go func() {
		_, err := c.Release(ctx, key, leaseID, "")
		released <- err
	}()
	return released
}

func handoffClient(t *testing.T, opts Options) (*Client, *redis.Client, *scriptCount) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	count := &scriptCount{}
	rdb.AddHook(count)
	c := New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb, count
}

// TestAReleaseHandsTheKeyToAWriterWaitingHere releases a key whose queue is
// headed by a writer waiting in the same process: the release's own script
// grants it the key, and the waiter needs no script of its own (one script
// per handoff instead of two), its grant a fresh lease with the next
// fencing token. The waiter behind it becomes the head and, once the key
// is released again, is handed the key in turn.
func TestAReleaseHandsTheKeyToAWriterWaitingHere(t *testing.T) {
	t.Parallel()
	c, _, count := handoffClient(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "handoff"
	first := holdKey(ctx, t, c, key)
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 20 * time.Second, RequestID: "r2"})
	offered(t, c, key)
	third := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "third", TTL: time.Minute, Wait: 20 * time.Second})
	waitQueued(t, c, key, 2)

	before := count.n.Load()
	if _, err := c.Release(ctx, key, first.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	got := <-second
	if got.err != nil || !got.res.Acquired || got.res.Lease.Owner != "second" {
		t.Fatalf("second Acquire = %+v, %v; want the key", got.res, got.err)
	}
	if n := count.n.Load() - before; n != 1 {
		t.Errorf("the handoff ran %d scripts, want 1 (the release, granting the waiter)", n)
	}
	if got.res.Lease.FencingToken <= first.Lease.FencingToken {
		t.Errorf("handed over with fencing token %d after %d", got.res.Lease.FencingToken, first.Lease.FencingToken)
	}
	if got.res.Lease.HoldCount != 1 || got.res.Lease.TTL != time.Minute {
		t.Errorf("handed lease = %+v, want held once for a minute", got.res.Lease)
	}
	// A retry of the request handed the key gets the same lease.
	again, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, RequestID: "r2"})
	if err != nil || !again.Acquired || again.Lease.ID != got.res.Lease.ID || again.Lease.FencingToken != got.res.Lease.FencingToken {
		t.Fatalf("retried request = %+v, %v; want the lease handed over, %+v", again, err, got.res.Lease)
	}

	// The third is the head now; its turn comes the same way.
	offered(t, c, key)
	if _, err := c.Release(ctx, key, got.res.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	last := <-third
	if last.err != nil || !last.res.Acquired || last.res.Lease.Owner != "third" {
		t.Fatalf("third Acquire = %+v, %v; want the key", last.res, last.err)
	}
	if _, err := c.Release(ctx, key, last.res.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	nothingLeft(t, c, key)
}

// waitQueued waits until key's queue holds n waiters.
func waitQueued(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		d, err := c.Describe(context.Background(), key)
		if err == nil && d.WaitingWriters == n {
			return
		}
	}
	t.Fatalf("key %q never had %d waiters", key, n)
}

// nothingLeft checks that no Redis key of the lock is left.
func nothingLeft(t *testing.T, c *Client, key string) {
	t.Helper()
	n, err := c.rdb.Exists(context.Background(), c.keys(key).record).Result()
	if err != nil || n != 0 {
		t.Fatalf("the lock's record is still there (%d, %v)", n, err)
	}
}

// releaseGate holds back each release script that hands a key over
// (release.lua with its fifth argument) until let is closed, and, with
// lose set, answers it with an error once it ran, as a reply lost on the
// way back would.
type releaseGate struct {
	held chan struct{} // closed when a handing release is held
	let  chan struct{}
	lose bool
	once atomic.Bool
}

func newReleaseGate(lose bool) *releaseGate {
	return &releaseGate{held: make(chan struct{}), let: make(chan struct{}), lose: lose}
}

func (g *releaseGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *releaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(args) > 3 {
			n, _ := args[2].(int)
			if len(args) == 3+n+5 && args[3+n+3] != "" {
				if g.once.CompareAndSwap(false, true) {
					close(g.held)
				}
				<-g.let
				err := next(ctx, cmd)
				if g.lose && err == nil {
					err = errors.New("reply lost")
					cmd.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (g *releaseGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAWaiterWhoseCallEndsDuringItsHandoffLeavesNothing has the waiter's
// call end (its caller gave up) while the release handing it the key is on
// its way: the waiter waits for that release's outcome, gives the grant
// back, and the key is free again, with nothing left behind.
func TestAWaiterWhoseCallEndsDuringItsHandoffLeavesNothing(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{})
	gate := newReleaseGate(false)
	rdb.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "handoff-cancelled"
	first := holdKey(ctx, t, c, key)
	wctx, wcancel := context.WithCancel(ctx)
	second := acquireAsync(wctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 20 * time.Second})
	offered(t, c, key)
	released := releaseAsync(ctx, c, key, first.Lease.ID)
	<-gate.held
	wcancel()
	time.Sleep(20 * time.Millisecond) // the waiter sees its call end, and waits for the release
	close(gate.let)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if got := <-second; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %+v, %v; want context.Canceled", got.res, got.err)
	}
	leftNothing(t, c, key) // the grant handed to a caller that went away is given back
}

// TestAHandoffWhoseReplyIsLostIsUndone loses the reply of a release that
// handed the key over: the waiter cannot know whether it was granted, so it
// gives back whatever it may have been granted and tries again under a
// fresh attempt, and ends up holding the key once, with one lease.
func TestAHandoffWhoseReplyIsLostIsUndone(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{})
	gate := newReleaseGate(true)
	close(gate.let)
	rdb.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "handoff-lost"
	first := holdKey(ctx, t, c, key)
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 20 * time.Second})
	offered(t, c, key)
	if _, err := c.Release(ctx, key, first.Lease.ID, ""); err == nil {
		t.Fatal("the release whose reply was lost answered OK")
	}
	got := <-second
	if got.err != nil || !got.res.Acquired || got.res.Lease.Owner != "second" {
		t.Fatalf("second Acquire = %+v, %v; want the key", got.res, got.err)
	}
	d, err := c.Describe(ctx, key)
	if err != nil || d.Held != 1 || len(d.Holders) != 1 || d.Holders[0].FencingToken != got.res.Lease.FencingToken || d.Holders[0].HoldCount != 1 {
		t.Fatalf("Describe = %+v, %v; want the one lease answered (token %d), held once", d, err, got.res.Lease.FencingToken)
	}
}

// TestAWaiterPastItsDeadlineIsNotHandedTheKey holds a handing release back
// until the waiter's wait is over: the release reaches Redis after the
// moment the waiter gave up on, so it hands nothing over, the waiter is
// answered not acquired, and nothing is left behind.
func TestAWaiterPastItsDeadlineIsNotHandedTheKey(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{})
	gate := newReleaseGate(false)
	rdb.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "handoff-late"
	first := holdKey(ctx, t, c, key)
	const wait = 500 * time.Millisecond
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: wait})
	offered(t, c, key)
	released := releaseAsync(ctx, c, key, first.Lease.ID)
	<-gate.held
	time.Sleep(wait + 100*time.Millisecond)
	close(gate.let)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if got := <-second; got.err != nil || got.res.Acquired {
		t.Fatalf("Acquire past its wait = %+v, %v; want not acquired", got.res, got.err)
	}
	leftNothing(t, c, key)
}

// TestNoHandoffWhileGrantsAreHeldBack releases a key after Redis lost
// lockd's data (the slot's marker is gone): new grants are held back for
// the grace period, handed over or not, so the waiter is not granted the
// key within its wait.
func TestNoHandoffWhileGrantsAreHeldBack(t *testing.T) {
	t.Parallel()
	c, rdb, _ := handoffClient(t, Options{DataLossGrace: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	const key = "handoff-paused"
	first := holdKey(ctx, t, c, key)
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: time.Second})
	offered(t, c, key)
	if err := rdb.Del(ctx, c.keys(key).marker).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, key, first.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := <-second; got.err != nil || got.res.Acquired {
		t.Fatalf("Acquire during the grace period = %+v, %v; want not acquired", got.res, got.err)
	}
}

// TestAHandoffThatReachesRedisTooLateGrantsNothing freezes Redis while a
// release that hands the key over is on its way, for longer than the
// client waits for a reply. The release fails; the waiter cannot know
// whether it was granted and undoes its try. When Redis thaws it runs the
// late release and the undo, in either order: the release hands nothing
// over past the moment the waiter gave up on, and an undo that runs first
// has taken the waiter's place. Either way no grant stays unheard for the
// waiter's next try to re-enter (two holds for one call): the waiter gets
// the key by a try of its own, held once.
func TestAHandoffThatReachesRedisTooLateGrantsNothing(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ReadTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := New(rdb, Options{})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Redis caches the scripts, and the pool keeps a few connections.
	const key = "handoff-frozen"
	hold := func(owner string) Lease {
		res, err := c.Acquire(ctx, Request{Key: key, Mode: Write, Owner: owner, TTL: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", owner, res, err)
		}
		return res.Lease
	}
	warm := hold("warm")
	waiting := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "warm-waiter", TTL: time.Minute, Wait: 20 * time.Second})
	offered(t, c, key)
	if _, err := c.Release(ctx, key, warm.ID, ""); err != nil {
		t.Fatal(err)
	}
	w := <-waiting
	if w.err != nil || !w.res.Acquired {
		t.Fatalf("warm-up waiter = %+v, %v", w.res, w.err)
	}
	if _, err := c.Release(ctx, key, w.res.Lease.ID, ""); err != nil {
		t.Fatal(err)
	}

	first := hold("first")
	second := acquireAsync(ctx, c, Request{Key: key, Mode: Write, Owner: "second", TTL: time.Minute, Wait: 20 * time.Second})
	offered(t, c, key)
	rs.Freeze()
	released := make(chan error, 1)
	go func() {
		_, err := c.Release(ctx, key, first.ID, "")
		released <- err
	}()
	time.Sleep(2500 * time.Millisecond)
	rs.Thaw()
	if err := <-released; err == nil {
		t.Fatal("the release answered although Redis was frozen past the read timeout")
	}
	got := <-second
	if got.err != nil || !got.res.Acquired || got.res.Lease.Owner != "second" {
		t.Fatalf("second Acquire = %+v, %v; want the key", got.res, got.err)
	}
	if got.res.Lease.HoldCount != 1 {
		t.Fatalf("one Acquire answered %d holds", got.res.Lease.HoldCount)
	}
	d, err := c.Describe(ctx, key)
	if err != nil || d.Held != 1 || len(d.Holders) != 1 || d.Holders[0].Owner != "second" || d.Holders[0].HoldCount != 1 {
		t.Fatalf("Describe = %+v, %v; want second's lease alone, held once", d, err)
	}
}
