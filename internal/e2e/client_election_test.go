package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/redistest"
)

// TestGoClientLeadershipLostBeforeTheNextIsElected freezes Redis (SIGSTOP)
// past the ttl of a Go client's leadership, with a second candidate
// campaigning through another lockd process: the leader's Lost closes
// before the second is elected, the term rises, and the old leader's late
// write is fenced off.
func TestGoClientLeadershipLostBeforeTheNextIsElected(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := startLockd(t, nil, "--redis="+srv.Addr())
	b := startLockd(t, nil, "--redis="+srv.Addr())
	first, second := newGoClient(t, a.addr), newGoClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = time.Second

	l1, err := first.NewElection("e2e/client/elect", client.WithTTL(ttl)).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		<-l1.Lost()
		lostAt <- time.Now()
	}()
	type elected struct {
		l  *client.Leadership
		at time.Time
	}
	next := make(chan elected, 1)
	go func() {
		l, err := second.NewElection("e2e/client/elect", client.WithTTL(ttl)).Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
			close(next)
			return
		}
		next <- elected{l, time.Now()}
	}()
	var res fencedResource
	if !res.write(l1.Term()) {
		t.Fatal("the first leader's write was rejected")
	}

	srv.Freeze()
	time.Sleep(3 * ttl) // Redis's clock runs on: the leadership expires there
	srv.Thaw()

	e, ok := <-next
	if !ok {
		return
	}
	select {
	case lost := <-lostAt:
		if !lost.Before(e.at) {
			t.Fatalf("Lost closed at %v, after the next leader was elected at %v", lost, e.at)
		}
	default:
		t.Fatalf("Lost still open after the next leader was elected (%v)", e.at)
	}
	if !errors.Is(l1.Err(), client.ErrLost) || e.l.Term() <= l1.Term() {
		t.Fatalf("Err = %v; term %d after %d", l1.Err(), e.l.Term(), l1.Term())
	}
	if !res.write(e.l.Term()) || res.write(l1.Term()) {
		t.Fatal("fencing by term failed: the new leader was rejected, or the old one accepted")
	}
}

// TestGoClientLeadershipLostWithItsReplica kills (SIGKILL) the lockd
// process a leader campaigns through: Lost closes, and a candidate on
// another process is elected for a higher term.
func TestGoClientLeadershipLostWithItsReplica(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := startLockd(t, nil, "--redis="+srv.Addr())
	b := startLockd(t, nil, "--redis="+srv.Addr())
	leader, other := newGoClient(t, a.addr, b.addr), newGoClient(t, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	l1, err := leader.NewElection("e2e/client/elect-kill", client.WithTTL(2*time.Second)).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	states, err := other.NewElection("e2e/client/elect-kill").Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	select {
	case <-l1.Lost():
	case <-ctx.Done():
		t.Fatal("Lost did not close")
	}
	l2, err := other.NewElection("e2e/client/elect-kill").Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Term() <= l1.Term() {
		t.Fatalf("term %d after %d", l2.Term(), l1.Term())
	}
	var last uint64
	for o := range states {
		if o.HasLeader && o.Leader.Term < last {
			t.Fatalf("observed term %d after %d", o.Leader.Term, last)
		}
		if o.HasLeader {
			last = o.Leader.Term
		}
		if last == l2.Term() {
			return
		}
	}
	t.Fatal("the observation channel closed")
}
