package clientsuite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/leasetest"
	"github.com/lockd/lockd/internal/redistest"
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

	l, err := leader.NewElection("c/elect-cut", client.WithTTL(2*time.Second)).Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	second := goCampaign(ctx, next.NewElection("c/elect-cut", client.WithTTL(2*time.Second)), "second")
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
	if expiry, err := leasetest.Expiry(ctx, rdb, "c/elect-cut", l.LeaseID()); err != nil || !expiry.After(now) {
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

	l, err := leader.NewElection("c/elect-freeze", client.WithTTL(time.Second)).Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	second := goCampaign(ctx, next.NewElection("c/elect-freeze", client.WithTTL(time.Second)), "second")
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

// TestObserveAcrossReplicas follows an election through a replica that is
// killed: the states go on through the next one, terms rising.
func TestObserveAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := startReplica(t, srv), startReplica(t, srv)
	watcher := newClient(t, []string{a.addr, b.addr})
	cand := newClient(t, []string{b.addr})
	ctx := timeout(t, time.Minute)

	states, err := watcher.NewElection("c/observe").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	l1, err := cand.NewElection("c/observe").Campaign(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader && o.Leader.Term == l1.Term() })
	a.kill()
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	nextState(ctx, t, states, func(o client.Observation) bool { return !o.HasLeader })
	l2, err := cand.NewElection("c/observe").Campaign(ctx, "two")
	if err != nil {
		t.Fatal(err)
	}
	o := nextState(ctx, t, states, func(o client.Observation) bool { return o.HasLeader })
	if o.Leader.Term != l2.Term() || o.Leader.Value != "two" || l2.Term() <= l1.Term() {
		t.Fatalf("observed %+v; terms %d then %d", o, l1.Term(), l2.Term())
	}
	if _, err := watcher.NewElection("").Observe(ctx); err == nil {
		t.Fatal("Observe of an empty name succeeded")
	}
}
