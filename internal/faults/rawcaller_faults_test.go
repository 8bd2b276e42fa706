package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

const (
	// rawFreeze is longer than the read timeout of lockd's Redis client
	// (3s): a script whose reply timed out is one that a client re-sending
	// it would run twice once Redis answers again.
	rawFreeze = 5 * time.Second
	// rawDeadline is the raw callers' deadline: far beyond the freeze, as
	// grpcurl's (none) or a generated stub's.
	rawDeadline = 30 * time.Second
	// rawClient is the raw callers' client id in the history: one caller
	// per key, each key's owner of its own.
	rawClient = 1000
)

// TestRawCallersThroughFreeze freezes Redis for longer than the read
// timeout of lockd's Redis client while callers without a request_id and
// with a long deadline (grpcurl, generated stubs) release one of two holds,
// re-enter a held lease, and take a free key, and while the usual clients
// hold and wait. Each call acts at most once: one Release never removes two
// holds, one Acquire never adds two, and a call that answers an error
// leaves nothing of its own behind. The holds are counted per call
// (AdminService.DescribeLock) once Redis answers again.
func TestRawCallersThroughFreeze(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("raw")
	probe := &rawProbe{
		lc: f.replicas[0], admin: lockdv1.NewAdminServiceClient(f.procs[0].Dial(t)), n: scaled(3, 5),
	}
	res := scenario{
		name: "raw callers through a Redis freeze",
		fault: fmt.Sprintf("SIGSTOP Redis for %v (beyond the 3s Redis read timeout) while callers without request_id and a %v deadline Release one of 2 holds, re-enter, and Acquire (ttl %v)",
			rawFreeze, rawDeadline, w.TTL),
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		inject: func(t *testing.T, run *Run, round int) []Window {
			probe.prepare(t, run, round)
			srv.Freeze()
			probe.fire(run)
			time.Sleep(rawFreeze)
			srv.Thaw()
			probe.wait()
			return nil
		},
		after: func(t *testing.T, run *Run) []string { return probe.check(t) },
	}.run(t)
	expectClean(t, res)
	t.Logf("raw calls: %s", probe.summary())
}

// rawCall is one call of a raw caller and what came of it.
type rawCall struct {
	kind         string // "Release", "re-entering Acquire", "Acquire"
	key, owner   string
	lease        string
	before       uint32 // holds of owner before the call
	reply        uint32 // hold_count answered
	err          error
	call, answer time.Time
}

// rawProbe makes the raw callers' calls and counts what each did.
type rawProbe struct {
	lc    lockdv1.LockServiceClient
	admin lockdv1.AdminServiceClient
	n     int

	calls   []*rawCall // all rounds'
	pending []*rawCall // this round's
	wg      sync.WaitGroup
}

// prepare takes, before the freeze, two holds of a lease to release one
// of, one hold to re-enter, and names a free key, n of each.
func (p *rawProbe) prepare(t *testing.T, run *Run, round int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.pending = nil
	for i := range p.n {
		for tag, c := range map[string]*rawCall{
			"release": {kind: "Release", before: 2},
			"reenter": {kind: "re-entering Acquire", before: 1},
			"acquire": {kind: "Acquire", before: 0},
		} {
			c.key = fmt.Sprintf("raw/%d/%s/%d", round, tag, i)
			c.owner = "raw-" + c.key
			for range c.before {
				call := time.Now()
				res, err := p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: c.key, Owner: c.owner, Ttl: durationpb.New(probeTTL)})
				if err != nil || !res.GetAcquired() {
					t.Fatalf("preparing %q: %v, %v", c.key, res, err)
				}
				l := res.GetLease()
				c.lease = l.GetLeaseId()
				run.History.Add(Event{Op: OpAcquire, Client: rawClient, Key: c.key, Lease: c.lease, Token: l.GetFencingToken(), Write: true, OK: true,
					Call: call, Return: time.Now(), Expire: l.GetExpireTime().AsTime(), HoldCount: l.GetHoldCount(), TTL: l.GetTtl().AsDuration()})
			}
			p.pending = append(p.pending, c)
		}
	}
	p.calls = append(p.calls, p.pending...)
}

// fire makes this round's calls, each in its own goroutine; Redis must be
// frozen. They are recorded in the run's history.
func (p *rawProbe) fire(run *Run) {
	for _, c := range p.pending {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), rawDeadline)
			defer cancel()
			c.call = time.Now()
			e := Event{Client: rawClient, Key: c.key, Lease: c.lease, Write: true, Call: c.call}
			if c.kind == "Release" {
				var res *lockdv1.ReleaseResponse
				res, c.err = p.lc.Release(ctx, &lockdv1.ReleaseRequest{Key: c.key, LeaseId: c.lease})
				c.reply = res.GetHoldCount()
				e.Op, e.HoldCount = OpRelease, c.reply
			} else {
				var res *lockdv1.AcquireResponse
				res, c.err = p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: c.key, Owner: c.owner, Ttl: durationpb.New(probeTTL)})
				c.reply = res.GetLease().GetHoldCount()
				if res.GetAcquired() {
					l := res.GetLease()
					e.OK, e.Lease, e.Token, e.Expire = true, l.GetLeaseId(), l.GetFencingToken(), l.GetExpireTime().AsTime()
					e.HoldCount, e.TTL = l.GetHoldCount(), l.GetTtl().AsDuration()
				}
				e.Op = OpAcquire
			}
			c.answer = time.Now()
			e.Return = c.answer
			if c.err != nil {
				e.Err = status.Code(c.err).String()
			}
			run.History.Add(e)
		}()
	}
}

// wait waits for this round's calls to be answered.
func (p *rawProbe) wait() { p.wg.Wait() }

// check counts, once Redis answers again, the holds each call left, and
// returns the violations: a call that acted twice, an answer that does not
// match what the call did, or an error that left something behind. Then it
// gives every hold back.
func (p *rawProbe) check(t *testing.T) []string {
	t.Helper()
	var bad []string
	for _, c := range p.calls {
		now, settled := p.settle(t, c)
		did := int(now) - int(c.before)
		switch {
		case did > 1 || did < -1:
			bad = append(bad, fmt.Sprintf("key %q: one %s (answered %s) changed %d holds to %d: it acted twice", c.key, c.kind, c.answered(), c.before, now))
		case c.err == nil && (now != c.reply || c.kind == "Release" && did != -1 || c.kind != "Release" && did != 1):
			bad = append(bad, fmt.Sprintf("key %q: one %s answered hold_count %d after %d holds; %d are held", c.key, c.kind, c.reply, c.before, now))
		case c.err != nil && !settled:
			bad = append(bad, fmt.Sprintf("key %q: one %s that answered %s left %d holds of %d after %v: what it may have done was not undone",
				c.key, c.kind, c.answered(), now, c.before, undoTimeout))
		}
		p.giveBack(t, c)
	}
	return bad
}

// settle returns the holds c's owner has, waiting (up to undoTimeout) for
// a call that answered an error to be undone, and whether they settled
// where they should: the count before the call (an error), anything (an
// answer).
func (p *rawProbe) settle(t *testing.T, c *rawCall) (uint32, bool) {
	t.Helper()
	deadline := time.Now().Add(undoTimeout)
	for {
		n := p.holds(t, c)
		// A Release cannot be undone once another could take the key; one
		// hold fewer is its outcome too.
		if c.err == nil || n == c.before || c.kind == "Release" && n == c.before-1 || time.Now().After(deadline) {
			return n, c.err == nil || n == c.before || c.kind == "Release" && n == c.before-1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holds returns how many holds c's owner has on c's key.
func (p *rawProbe) holds(t *testing.T, c *rawCall) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.admin.DescribeLock(ctx, &lockdv1.DescribeLockRequest{Key: c.key})
	if err != nil {
		t.Fatalf("DescribeLock %q: %v", c.key, err)
	}
	for _, h := range res.GetLock().GetHolders() {
		if h.GetOwner() == c.owner {
			return h.GetHoldCount()
		}
	}
	return 0
}

// giveBack releases every hold c's owner still has.
func (p *rawProbe) giveBack(t *testing.T, c *rawCall) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.admin.DescribeLock(ctx, &lockdv1.DescribeLockRequest{Key: c.key})
	if err != nil || len(res.GetLock().GetHolders()) == 0 {
		return
	}
	probe, err := p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: c.key, Owner: c.owner, Ttl: durationpb.New(time.Second)})
	if err != nil || !probe.GetAcquired() {
		return
	}
	for range probe.GetLease().GetHoldCount() {
		if _, err := p.lc.Release(ctx, &lockdv1.ReleaseRequest{Key: c.key, LeaseId: probe.GetLease().GetLeaseId()}); err != nil {
			return
		}
	}
}

// answered says how the call ended.
func (c *rawCall) answered() string {
	if c.err != nil {
		return status.Code(c.err).String()
	}
	return fmt.Sprintf("OK, hold_count %d, after %v", c.reply, c.answer.Sub(c.call).Round(time.Millisecond))
}

// summary lists every call and its answer.
func (p *rawProbe) summary() string {
	var b []byte
	for _, c := range p.calls {
		b = fmt.Appendf(b, "\n  %s %q (%d holds before): %s", c.kind, c.key, c.before, c.answered())
	}
	return string(b)
}
