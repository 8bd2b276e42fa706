package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/locktest"
	"github.com/lockd/lockd/internal/redistest"
)

// campaigned is the outcome of a Campaign run in the background.
type campaigned struct {
	l   *client.Leadership
	err error
	at  time.Time
}

func goCampaign(ctx context.Context, c *client.Client, name, value string, opts ...client.LockOption) <-chan campaigned {
	out := make(chan campaigned, 1)
	go func() {
		l, err := c.Campaign(ctx, name, value, opts...)
		out <- campaigned{l, err, time.Now()}
	}()
	return out
}

// nextState waits for an observation that satisfies ok.
func nextState(ctx context.Context, t *testing.T, states <-chan client.Observation, ok func(client.Observation) bool) client.Observation {
	t.Helper()
	for {
		select {
		case o, open := <-states:
			if !open {
				t.Fatal("the observation channel closed")
			}
			if ok(o) {
				return o
			}
		case <-ctx.Done():
			t.Fatal("the awaited state did not come")
		}
	}
}

func TestCampaignProclaimResign(t *testing.T) {
	t.Parallel()
	r := startReplica(t, redistest.Start(t))
	a, b, watcher := newClient(t, []string{r.addr}), newClient(t, []string{r.addr}), newClient(t, []string{r.addr})
	ctx := timeout(t, time.Minute)

	states, err := watcher.Observe(ctx, "c/elect")
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	if _, err := a.Leader(ctx, "c/elect"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader of an election without one = %v, want ErrNoLeader", err)
	}

	la, err := a.Campaign(ctx, "c/elect", "10.0.0.1:80", client.WithTTL(time.Second), client.WithOwner("a"))
	if err != nil {
		t.Fatal(err)
	}
	if la.Term() == 0 || la.LeaseID() == "" || la.Owner() != "a" || la.Value() != "10.0.0.1:80" || la.Name() != "c/elect" {
		t.Fatalf("leadership: term %d lease %q owner %q value %q", la.Term(), la.LeaseID(), la.Owner(), la.Value())
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Term == la.Term() })
	second := goCampaign(ctx, b, "c/elect", "10.0.0.2:80", client.WithTTL(time.Second))

	// The leadership outlives several ttls while the other candidate waits.
	exp := la.ExpireTime()
	for !la.ExpireTime().After(exp.Add(2 * time.Second)) {
		select {
		case c := <-second:
			t.Fatalf("a second leader was elected while the first led: %+v", c)
		case <-la.Lost():
			t.Fatalf("leadership lost: %v", la.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}

	if err := la.Proclaim(ctx, "10.0.0.1:81"); err != nil {
		t.Fatal(err)
	}
	if la.Value() != "10.0.0.1:81" {
		t.Fatalf("value after Proclaim = %q", la.Value())
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Value == "10.0.0.1:81" })
	if cur, err := b.Leader(ctx, "c/elect"); err != nil || cur.Term != la.Term() || cur.Value != "10.0.0.1:81" || cur.Owner != "a" {
		t.Fatalf("Leader = %+v, %v", cur, err)
	}

	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.Resign(ctx); !errors.Is(err, client.ErrResigned) {
		t.Fatalf("second Resign = %v", err)
	}
	c := <-second
	if c.err != nil {
		t.Fatal(c.err)
	}
	if c.l.Term() <= la.Term() {
		t.Fatalf("term %d after %d", c.l.Term(), la.Term())
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Term == c.l.Term() })
	select {
	case <-la.Lost():
		t.Fatal("a resigned leadership reported lost")
	default:
	}
}

// TestLeadershipLostBeforeAnotherIsElected kills the replicas a leader
// campaigns through: Lost closes while Redis still holds the leadership,
// and the next candidate (on another replica) is elected only after, for
// a higher term.
func TestLeadershipLostBeforeAnotherIsElected(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a, b, other := startReplica(t, srv), startReplica(t, srv), startReplica(t, srv)
	leader := newClient(t, []string{a.addr, b.addr})
	next := newClient(t, []string{other.addr})
	ctx := timeout(t, time.Minute)

	l, err := leader.Campaign(ctx, "c/elect-cut", "first", client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	second := goCampaign(ctx, next, "c/elect-cut", "second", client.WithTTL(2*time.Second))
	a.kill()
	b.kill()
	select {
	case <-l.Lost():
	case c := <-second:
		t.Fatalf("another candidate was elected before the leader learned of its loss: %+v", c)
	case <-ctx.Done():
		t.Fatal("Lost did not close")
	}
	lostAt := time.Now()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if expiry, err := locktest.Expiry(ctx, rdb, "c/elect-cut", l.LeaseID()); err != nil || !expiry.After(now) {
		t.Fatalf("the leadership was over in Redis (expiry %v at %v, %v) when Lost closed", expiry, now, err)
	}
	if !errors.Is(l.Err(), client.ErrLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	c := <-second
	if c.err != nil {
		t.Fatal(c.err)
	}
	if !c.at.After(lostAt) || c.l.Term() <= l.Term() {
		t.Fatalf("second leader elected at %v (loss at %v), term %d after %d", c.at, lostAt, c.l.Term(), l.Term())
	}
	if err := l.Proclaim(ctx, "x"); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Proclaim of a lost leadership = %v", err)
	}
}

// TestLeadershipLostWhenRedisFreezes freezes Redis past the leadership's
// ttl: no renewal comes, and Lost closes by the client's own clock; once
// Redis is back the next candidate is elected for a higher term.
func TestLeadershipLostWhenRedisFreezes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r1, r2 := startReplica(t, srv), startReplica(t, srv)
	leader := newClient(t, []string{r1.addr})
	next := newClient(t, []string{r2.addr})
	ctx := timeout(t, time.Minute)

	l, err := leader.Campaign(ctx, "c/elect-freeze", "first", client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	second := goCampaign(ctx, next, "c/elect-freeze", "second", client.WithTTL(time.Second))
	srv.Freeze()
	select {
	case <-l.Lost():
	case <-ctx.Done():
		srv.Thaw()
		t.Fatal("Lost did not close")
	}
	srv.Thaw()
	c := <-second
	if c.err != nil {
		t.Fatal(c.err)
	}
	if c.l.Term() <= l.Term() {
		t.Fatalf("term %d after %d", c.l.Term(), l.Term())
	}
}

// TestLeadershipLostWhenTheLeaseIsGone releases the leadership's lease
// behind the leader's back: the Campaign stream ends NOT_FOUND.
func TestLeadershipLostWhenTheLeaseIsGone(t *testing.T) {
	t.Parallel()
	r := startReplica(t, redistest.Start(t))
	c := newClient(t, []string{r.addr})
	ctx := timeout(t, time.Minute)
	l, err := c.Campaign(ctx, "c/elect-gone", "v", client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw(t, r).Release(ctx, &lockdv1.ReleaseRequest{Key: "c/elect-gone", LeaseId: l.LeaseID()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("Lost did not close")
	}
	if err := l.Resign(ctx); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Resign of a lost leadership = %v", err)
	}
}

// TestObserveAcrossReplicas follows an election through a replica that is
// killed: the states go on through the next one, terms rising.
func TestObserveAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := startReplica(t, srv), startReplica(t, srv)
	watcher := newClient(t, []string{a.addr, b.addr})
	cand := newClient(t, []string{b.addr})
	ctx := timeout(t, time.Minute)

	states, err := watcher.Observe(ctx, "c/observe")
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	l1, err := cand.Campaign(ctx, "c/observe", "one")
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Term == l1.Term() })
	a.kill()
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	l2, err := cand.Campaign(ctx, "c/observe", "two")
	if err != nil {
		t.Fatal(err)
	}
	o := nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader })
	if o.Leader.Term != l2.Term() || o.Leader.Value != "two" || l2.Term() <= l1.Term() {
		t.Fatalf("observed %+v; terms %d then %d", o, l1.Term(), l2.Term())
	}
	if _, err := watcher.Observe(ctx, ""); err == nil {
		t.Fatal("Observe of an empty name succeeded")
	}
}

// TestElectionRun runs two candidates: the first leader is deposed behind
// its back, its context ends, the other is elected for a higher term, and
// the first campaigns again; both Runs end with their context.
func TestElectionRun(t *testing.T) {
	t.Parallel()
	r := startReplica(t, redistest.Start(t))
	ctx := timeout(t, time.Minute)
	type led struct {
		who string
		l   *client.Leadership
	}
	leaders := make(chan led, 10)
	run := func(rctx context.Context, c *client.Client, value string) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- c.NewElection("c/run", client.WithTTL(time.Second)).Run(rctx, value, func(lctx context.Context, l *client.Leadership) error {
				leaders <- led{value, l}
				<-lctx.Done() // lead until lost, or the run ends
				return nil
			})
		}()
		return done
	}
	c1, c2 := newClient(t, []string{r.addr}), newClient(t, []string{r.addr})
	ctx1, stop1 := context.WithCancel(ctx)
	ctx2, stop2 := context.WithCancel(ctx)
	d1 := run(ctx1, c1, "one")
	first := <-leaders
	d2 := run(ctx2, c2, "two")
	if cur, err := c2.Leader(ctx, "c/run"); err != nil || cur.Term != first.l.Term() || cur.Value != "one" {
		t.Fatalf("Leader = %+v, %v", cur, err)
	}
	if _, err := raw(t, r).Release(ctx, &lockdv1.ReleaseRequest{Key: "c/run", LeaseId: first.l.LeaseID()}); err != nil {
		t.Fatal(err)
	}
	var second led
	select {
	case second = <-leaders:
	case <-ctx.Done():
		t.Fatal("no second leader")
	}
	if second.who != "two" || second.l.Term() <= first.l.Term() || first.l.Err() == nil {
		t.Fatalf("second leader %q term %d after %d (first lost: %v)", second.who, second.l.Term(), first.l.Term(), first.l.Err())
	}
	stop2() // the second resigns; the first, campaigning again, leads
	if err := <-d2; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	third := <-leaders
	if third.who != "one" || third.l.Term() <= second.l.Term() {
		t.Fatalf("third leader %q term %d after %d", third.who, third.l.Term(), second.l.Term())
	}
	stop1()
	if err := <-d1; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if _, err := c1.Leader(ctx, "c/run"); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after both Runs ended = %v, want ErrNoLeader", err)
	}
}

// TestCloseEndsCampaignsAndObservers closes a client with an observer
// whose context never ends and a candidate waiting: Close returns, the
// channel closes, and the waiting Campaign gives up with ErrClosed.
func TestCloseEndsCampaignsAndObservers(t *testing.T) {
	t.Parallel()
	r := startReplica(t, redistest.Start(t))
	holder := newClient(t, []string{r.addr})
	c, err := client.New([]string{r.addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, time.Minute)
	if _, err := holder.Campaign(ctx, "c/close", "holder"); err != nil {
		t.Fatal(err)
	}
	states, err := c.Observe(context.Background(), "c/close")
	if err != nil {
		t.Fatal(err)
	}
	<-states
	waiting := goCampaign(context.Background(), c, "c/close", "waiting")
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	for range states {
	}
	select {
	case w := <-waiting:
		if !errors.Is(w.err, client.ErrClosed) {
			t.Fatalf("Campaign on a closed client = %v, want ErrClosed", w.err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting Campaign did not end")
	}
}
