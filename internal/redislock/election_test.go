package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/redistest"
)

// campaign runs a Campaign in the background and returns a channel that
// gets its outcome.
func campaign(ctx context.Context, c *redislock.Client, req redislock.CampaignRequest) <-chan campaignResult {
	out := make(chan campaignResult, 1)
	go func() {
		l, err := c.Campaign(ctx, req)
		out <- campaignResult{l, err}
	}()
	return out
}

type campaignResult struct {
	lead *redislock.Leadership
	err  error
}

func mustLead(t *testing.T, c *redislock.Client, req redislock.CampaignRequest) *redislock.Leadership {
	t.Helper()
	l, err := c.Campaign(ctxT(t, 10*time.Second), req)
	if err != nil {
		t.Fatalf("Campaign(%+v): %v", req, err)
	}
	return l
}

// contractElection walks one election through its states: a leader with
// its value, a candidate waiting, a new value, resignation handing over to
// the candidate with a higher term, and no leader at the end.
func contractElection(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 30*time.Second)
	if _, err := c.Leader(ctx, "sched"); !errors.Is(err, redislock.ErrNoLeader) {
		t.Fatalf("Leader of an empty election: %v, want ErrNoLeader", err)
	}
	a := mustLead(t, c, redislock.CampaignRequest{Name: "sched", Value: "10.0.0.1:80", Owner: "a", TTL: minute})
	got := a.Leader()
	if got.Name != "sched" || got.Value != "10.0.0.1:80" || got.Owner != "a" || got.Term == 0 || len(a.LeaseID()) < 22 {
		t.Fatalf("leadership = %+v, lease %q", got, a.LeaseID())
	}
	if d := time.Until(got.ExpireTime); d < 50*time.Second || d > minute+time.Second {
		t.Fatalf("leadership expires in %v", d)
	}
	if l, err := c.Leader(ctx, "sched"); err != nil || l.Term != got.Term || l.Value != got.Value || l.Owner != "a" {
		t.Fatalf("Leader = %+v, %v; want %+v", l, err, got)
	}

	b2 := campaign(ctx, c, redislock.CampaignRequest{Name: "sched", Value: "10.0.0.2:80", Owner: "b", TTL: minute})
	if l, err := c.Proclaim(ctx, "sched", a.LeaseID(), "10.0.0.1:81"); err != nil || l.Value != "10.0.0.1:81" || l.Term != got.Term {
		t.Fatalf("Proclaim = %+v, %v", l, err)
	}
	if l, err := c.Leader(ctx, "sched"); err != nil || l.Value != "10.0.0.1:81" {
		t.Fatalf("Leader after Proclaim = %+v, %v", l, err)
	}
	select {
	case r := <-b2:
		t.Fatalf("a second candidate was elected while the first leads: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}

	if ok, err := a.Resign(ctx); !ok || err != nil {
		t.Fatalf("Resign = %v, %v", ok, err)
	}
	r := <-b2
	if r.err != nil {
		t.Fatal(r.err)
	}
	bl := r.lead.Leader()
	if bl.Term <= got.Term || bl.Owner != "b" || bl.Value != "10.0.0.2:80" {
		t.Fatalf("second leader = %+v after %+v", bl, got)
	}
	if _, err := c.Proclaim(ctx, "sched", a.LeaseID(), "x"); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Proclaim by the resigned leader: %v, want ErrNotHeld", err)
	}
	if err := c.Resign(ctx, "sched", a.LeaseID()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Resign by the resigned leader: %v, want ErrNotHeld", err)
	}
	if err := c.Resign(ctx, "sched", r.lead.LeaseID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leader(ctx, "sched"); !errors.Is(err, redislock.ErrNoLeader) {
		t.Fatalf("Leader after every leader resigned: %v, want ErrNoLeader", err)
	}

	// A plain write lock of the name is no leader; Proclaim makes it one.
	w := mustAcquire(t, c, redislock.Request{Key: "sched", Mode: redislock.Write, Owner: "w", TTL: minute})
	if _, err := c.Leader(ctx, "sched"); !errors.Is(err, redislock.ErrNoLeader) {
		t.Fatalf("Leader of a plain lock: %v, want ErrNoLeader", err)
	}
	r1 := mustAcquire(t, c, redislock.Request{Key: "sched-read", Mode: redislock.Read, Owner: "r", TTL: minute})
	if _, err := c.Proclaim(ctx, "sched-read", r1.ID, "x"); !errors.Is(err, redislock.ErrNotLeader) {
		t.Fatalf("Proclaim with a read lease: %v, want ErrNotLeader", err)
	}
	if l, err := c.Proclaim(ctx, "sched", w.ID, "v"); err != nil || l.Term != w.FencingToken {
		t.Fatalf("Proclaim by the write holder = %+v, %v", l, err)
	}
	if l, err := c.Leader(ctx, "sched"); err != nil || l.Owner != "w" {
		t.Fatalf("Leader = %+v, %v", l, err)
	}
}

// contractElectionInvalidRequests checks the engine's own validation.
func contractElectionInvalidRequests(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct {
		name string
		req  redislock.CampaignRequest
		want error
	}{
		{"empty name", redislock.CampaignRequest{TTL: minute}, redislock.ErrInvalidKey},
		{"value too long", redislock.CampaignRequest{Name: "e", Value: string(make([]byte, redislock.MaxValueBytes+1)), TTL: minute}, redislock.ErrInvalidValue},
		{"value not UTF-8", redislock.CampaignRequest{Name: "e", Value: "\xff", TTL: minute}, redislock.ErrInvalidValue},
		{"no ttl", redislock.CampaignRequest{Name: "e"}, redislock.ErrInvalidTTL},
	} {
		if _, err := c.Campaign(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	a := mustLead(t, c, redislock.CampaignRequest{Name: "e", TTL: minute})
	if _, err := c.Proclaim(ctx, "e", a.LeaseID(), "\xff"); !errors.Is(err, redislock.ErrInvalidValue) {
		t.Errorf("Proclaim of invalid UTF-8: %v", err)
	}
	if _, err := c.Leader(ctx, ""); !errors.Is(err, redislock.ErrInvalidKey) {
		t.Errorf("Leader of an empty name: %v", err)
	}
}

// contractObserve follows an election from an observer's seat: none at
// first, each leader and value, none again when the leader resigns and
// when its lease runs out (no message tells of that), terms only rising.
func contractObserve(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	obsClient := b.newClient(t, redislock.Options{MaxRecheck: time.Hour}) // messages and expiry only
	ctx := ctxT(t, 30*time.Second)
	seen := make(chan redislock.Observation, 100)
	ended := make(chan error, 1)
	go func() {
		ended <- obsClient.Observe(ctx, "obs", func(o redislock.Observation) error {
			seen <- o
			return nil
		})
	}()
	next := func(what string) redislock.Observation {
		t.Helper()
		select {
		case o := <-seen:
			return o
		case err := <-ended:
			t.Fatalf("waiting for %s: Observe ended: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("waiting for %s: no observation", what)
		}
		return redislock.Observation{}
	}
	if o := next("the first state"); o.Elected {
		t.Fatalf("first observation %+v, want no leader", o)
	}
	a := mustLead(t, c, redislock.CampaignRequest{Name: "obs", Value: "a1", Owner: "a", TTL: minute})
	if o := next("a's election"); !o.Elected || o.Leader.Owner != "a" || o.Leader.Value != "a1" || o.Leader.Term != a.Leader().Term {
		t.Fatalf("observation %+v, want a", o)
	}
	if _, err := c.Proclaim(ctx, "obs", a.LeaseID(), "a2"); err != nil {
		t.Fatal(err)
	}
	if o := next("a's new value"); o.Leader.Value != "a2" || o.Leader.Term != a.Leader().Term {
		t.Fatalf("observation %+v, want a2", o)
	}
	if ok, err := a.Resign(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if o := next("a's resignation"); o.Elected {
		t.Fatalf("observation %+v, want no leader", o)
	}
	// A leader that is never renewed: only its expiry tells.
	bl := mustLead(t, c, redislock.CampaignRequest{Name: "obs", Value: "b", Owner: "b", TTL: 300 * time.Millisecond})
	if o := next("b's election"); !o.Elected || o.Leader.Term <= a.Leader().Term || o.Leader.Owner != "b" {
		t.Fatalf("observation %+v, want b with a higher term than %d", o, a.Leader().Term)
	}
	if o := next("b's expiry"); o.Elected {
		t.Fatalf("observation %+v, want no leader", o)
	}
	if l, err := c.Leader(ctx, "obs"); !errors.Is(err, redislock.ErrNoLeader) {
		t.Fatalf("Leader after b's lease ran out = %+v, %v", l, err)
	}
	_ = bl
	select {
	case o := <-seen:
		t.Fatalf("an observation without a change: %+v", o)
	default:
	}
}

// contractLeadershipIsKeptAndLost keeps a leadership alive past its ttl,
// sees Keep end with ErrNotHeld when the lease is resigned elsewhere, and
// resumes a leadership by campaigning again with the same owner.
func contractLeadershipIsKeptAndLost(t *testing.T, b backend) {
	c := b.newClient(t, redislock.Options{})
	ctx := ctxT(t, time.Minute)
	// Long enough that renewals keep up on a loaded machine.
	const ttl = 2 * time.Second
	a := mustLead(t, c, redislock.CampaignRequest{Name: "kept", Value: "a", Owner: "a", TTL: ttl})
	var renewals atomic.Int64
	kept := make(chan error, 1)
	term := a.Leader().Term
	go func() {
		kept <- a.Keep(ctx, func(l redislock.Leader) {
			if l.Term != term {
				t.Errorf("renewed leadership has term %d", l.Term)
			}
			renewals.Add(1)
		})
	}()
	waitUntil(t, "renewals past the ttl", func() bool {
		select {
		case err := <-kept:
			t.Fatalf("Keep ended after %d renewals: %v", renewals.Load(), err)
		default:
		}
		return renewals.Load() >= 4
	})
	if l, err := c.Leader(ctx, "kept"); err != nil || l.Owner != "a" {
		t.Fatalf("Leader after %d renewals = %+v, %v", renewals.Load(), l, err)
	}

	// The same owner campaigning again resumes the leadership.
	again := mustLead(t, c, redislock.CampaignRequest{Name: "kept", Value: "a-resumed", Owner: "a", TTL: ttl})
	if again.LeaseID() != a.LeaseID() || again.Leader().Term != a.Leader().Term {
		t.Fatalf("resumed leadership %+v (%s), want %+v (%s)", again.Leader(), again.LeaseID(), a.Leader(), a.LeaseID())
	}
	// The first campaign is no longer the newest: its Resign leaves the
	// leadership alone.
	if ok, err := a.Resign(ctx); ok || err != nil {
		t.Fatalf("stale Resign = %v, %v; want false", ok, err)
	}
	if l, err := c.Leader(ctx, "kept"); err != nil || l.Value != "a-resumed" {
		t.Fatalf("Leader = %+v, %v", l, err)
	}

	// Resigned behind its back, the keeping campaign learns at once.
	if err := c.Resign(ctx, "kept", a.LeaseID()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-kept:
		if !errors.Is(err, redislock.ErrNotHeld) {
			t.Fatalf("Keep ended with %v, want ErrNotHeld", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Keep did not end after the leadership was resigned")
	}
}

// contractOneLeaderAtATime has candidates on two engines sharing one Redis
// campaign, lead briefly and resign, over and over, counting leaders that
// overlap and checking that terms only rise.
func contractOneLeaderAtATime(t *testing.T, b backend) {
	engines := []*redislock.Client{b.newClient(t, redislock.Options{}), b.newClient(t, redislock.Options{})}
	const (
		candidates = 16
		terms      = 6
	)
	var (
		mu        sync.Mutex
		leading   int
		overlaps  int
		lastTerm  uint64
		backwards int
		elected   atomic.Int64
	)
	ctx := ctxT(t, 2*time.Minute)
	var wg sync.WaitGroup
	for i := range candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := engines[i%len(engines)]
			for range terms {
				l, err := c.Campaign(ctx, redislock.CampaignRequest{Name: "contended", Value: fmt.Sprint(i), Owner: fmt.Sprint("c", i), TTL: 30 * time.Second})
				if err != nil {
					t.Errorf("candidate %d: %v", i, err)
					return
				}
				elected.Add(1)
				mu.Lock()
				leading++
				if leading > 1 {
					overlaps++
				}
				if l.Leader().Term <= lastTerm {
					backwards++
				}
				lastTerm = l.Leader().Term
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				leading--
				mu.Unlock()
				if ok, err := l.Resign(ctx); !ok || err != nil {
					t.Errorf("candidate %d: Resign = %v, %v", i, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps != 0 || backwards != 0 {
		t.Fatalf("%d overlapping leaders and %d terms that did not rise in %d elections", overlaps, backwards, elected.Load())
	}
	if elected.Load() != candidates*terms {
		t.Fatalf("%d elections, want %d", elected.Load(), candidates*terms)
	}
}

// TestLeadershipEndsBeforeItsLeaseWithRedisFrozen freezes Redis under a
// kept leadership and an observer: Keep reports the leadership lost before
// its lease as last confirmed runs out, and the observer's watch ends (it
// can no longer vouch for the leader) rather than going on showing it.
func TestLeadershipEndsBeforeItsLeaseWithRedisFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv.Client(t), redislock.Options{})
	const ttl = 2 * time.Second
	lead := mustLead(t, c, redislock.CampaignRequest{Name: "frozen", Owner: "a", TTL: ttl})

	observed := make(chan redislock.Observation, 10)
	watchEnded := make(chan error, 1)
	go func() {
		watchEnded <- c.Observe(context.Background(), "frozen", func(o redislock.Observation) error {
			observed <- o
			return nil
		})
	}()
	if o := <-observed; !o.Elected {
		t.Fatalf("first observation %+v, want the leader", o)
	}

	var lastRenewal time.Time
	renewals := 0
	kept := make(chan error, 1)
	go func() {
		kept <- lead.Keep(context.Background(), func(redislock.Leader) {
			lastRenewal = time.Now()
			renewals++
			if renewals == 2 {
				srv.Freeze()
			}
		})
	}()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	var err error
	select {
	case err = <-kept:
	case <-time.After(30 * time.Second):
		t.Fatal("Keep kept going with Redis frozen")
	}
	gaveUp := time.Now()
	if !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Keep = %v, want ErrNotHeld", err)
	}
	if !gaveUp.Before(lastRenewal.Add(ttl)) {
		t.Fatalf("gave up %v after the last renewal, not before the %v lease ran out", gaveUp.Sub(lastRenewal), ttl)
	}
	select {
	case err := <-watchEnded:
		if err == nil {
			t.Fatal("the watch ended without an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch went on with Redis frozen")
	}
	srv.Thaw()
	thawed = true
	for len(observed) > 0 {
		if o := <-observed; o.Elected {
			t.Fatalf("observed %+v after the leader's first state", o)
		}
	}
}

// TestObserverNeverGoesBackToAnOlderTerm restores an older copy of an
// election's record, as a failover to a replica that had not caught up
// would: it names a leader whose lease has not run out by its own record,
// but whose term is below one already reported. The observer reports no
// leader rather than the deposed one, and Leader, which has no past to
// compare with, reports what Redis holds.
func TestObserverNeverGoesBackToAnOlderTerm(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	c := newClient(t, rdb, redislock.Options{})
	ctx := ctxT(t, 30*time.Second)
	observed := make(chan redislock.Observation, 10)
	go func() {
		_ = c.Observe(ctx, "lagging", func(o redislock.Observation) error {
			observed <- o
			return nil
		})
	}()
	next := func() redislock.Observation {
		t.Helper()
		select {
		case o := <-observed:
			return o
		case <-ctx.Done():
			t.Fatal("no observation")
		}
		return redislock.Observation{}
	}
	next() // none yet
	a := mustLead(t, c, redislock.CampaignRequest{Name: "lagging", Value: "a", Owner: "a", TTL: minute})
	if o := next(); o.Leader.Owner != "a" {
		t.Fatalf("observation %+v, want a", o)
	}
	old, err := rdb.Dump(ctx, "lockd:{lagging}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Resign(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	b := mustLead(t, c, redislock.CampaignRequest{Name: "lagging", Value: "b", Owner: "b", TTL: minute})
	for o := next(); o.Leader.Owner != "b"; o = next() {
		if o.Elected {
			t.Fatalf("observation %+v between a and b", o)
		}
	}

	// The older copy comes back, naming a as the leader.
	if err := rdb.RestoreReplace(ctx, "lockd:{lagging}", 0, old).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(ctx, "lagging"); err != nil || l.Owner != "a" {
		t.Fatalf("Leader of the restored record = %+v, %v; want a, as Redis holds it", l, err)
	}
	if err := rdb.Publish(ctx, "lockd:{lagging}:leader", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if o := next(); o.Elected {
		t.Fatalf("observation %+v after a term %d was reported: a deposed leader", o, b.Leader().Term)
	}
}
