package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// campaigned is the outcome of a Campaign run in the background.
type campaigned struct {
	l   *client.Leadership
	err error
	at  time.Time
}

// goCampaign campaigns in e with value in the background.
func goCampaign(ctx context.Context, e *client.Election, value string) <-chan campaigned {
	out := make(chan campaigned, 1)
	go func() {
		l, err := e.Campaign(ctx, value)
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
	a, b, watcher := newClient(t), newClient(t), newClient(t)
	ctx := timeout(t, time.Minute)

	states, err := watcher.NewElection("c/elect").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	if _, err := a.NewElection("c/elect").Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader of an election without one = %v, want ErrNoLeader", err)
	}

	la, err := a.NewElection("c/elect", client.WithTTL(time.Second), client.WithOwner("a")).Campaign(ctx, "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	if la.Term() == 0 || la.LeaseID() == "" || la.Owner() != "a" || la.Value() != "10.0.0.1:80" || la.Name() != "c/elect" {
		t.Fatalf("leadership: term %d lease %q owner %q value %q", la.Term(), la.LeaseID(), la.Owner(), la.Value())
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Term == la.Term() })
	second := goCampaign(ctx, b.NewElection("c/elect", client.WithTTL(time.Second)), "10.0.0.2:80")

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
	if cur, err := b.NewElection("c/elect").Leader(ctx); err != nil || cur.Term != la.Term() || cur.Value != "10.0.0.1:81" || cur.Owner != "a" {
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

// TestLeadershipLostWhenTheLeaseIsGone releases the leadership's lease
// behind the leader's back: the Campaign stream ends NOT_FOUND.
func TestLeadershipLostWhenTheLeaseIsGone(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := timeout(t, time.Minute)
	l, err := c.NewElection("c/elect-gone", client.WithTTL(time.Second)).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw(t).Release(ctx, &lockdv1.ReleaseRequest{Key: "c/elect-gone", LeaseId: l.LeaseID()}); err != nil {
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

// TestElectionRun runs two candidates: the first leader is deposed behind
// its back, its context ends, the other is elected for a higher term, and
// the first campaigns again; both Runs end with their context.
func TestElectionRun(t *testing.T) {
	t.Parallel()
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
	c1, c2 := newClient(t), newClient(t)
	ctx1, stop1 := context.WithCancel(ctx)
	ctx2, stop2 := context.WithCancel(ctx)
	d1 := run(ctx1, c1, "one")
	first := <-leaders
	d2 := run(ctx2, c2, "two")
	if cur, err := c2.NewElection("c/run").Leader(ctx); err != nil || cur.Term != first.l.Term() || cur.Value != "one" {
		t.Fatalf("Leader = %+v, %v", cur, err)
	}
	if _, err := raw(t).Release(ctx, &lockdv1.ReleaseRequest{Key: "c/run", LeaseId: first.l.LeaseID()}); err != nil {
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
	if _, err := c1.NewElection("c/run").Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after both Runs ended = %v, want ErrNoLeader", err)
	}
}

// TestCloseEndsCampaignsAndObservers closes a client with an observer
// whose context never ends and a candidate waiting: Close returns, the
// channel closes, and the waiting Campaign gives up with ErrClosed.
func TestCloseEndsCampaignsAndObservers(t *testing.T) {
	t.Parallel()
	holder := newClient(t)
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, time.Minute)
	if _, err := holder.NewElection("c/close").Campaign(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	states, err := c.NewElection("c/close").Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-states
	waiting := goCampaign(context.Background(), c.NewElection("c/close"), "waiting")
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
