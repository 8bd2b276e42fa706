package faults

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

const (
	// probeTTL is the probes' lease span: long enough that a lease left
	// behind is still there when the probe checks.
	probeTTL = 2 * time.Minute
	// probeDeadline is the probes' call deadline: far shorter than the
	// freeze, so Redis runs the call only after the caller gave up.
	probeDeadline = 300 * time.Millisecond
	// undoTimeout is how long lockd may take, once Redis answers again, to
	// undo what a call whose reply was lost did.
	undoTimeout = 20 * time.Second
)

// lostReplyProbe makes calls whose replies a frozen Redis swallows: fresh
// Acquires without a request_id, and re-entries of held leases. lockd must
// undo exactly what each did.
type lostReplyProbe struct {
	lc      lockdv1.LockServiceClient
	n       int
	reentry []*lockdv1.Lease // held before the freeze; re-entered during it
	fresh   []string         // keys whose Acquire failed during a freeze
	round   int
}

// newLostReplyProbe takes n leases to re-enter later, through the fleet's
// first replica.
func newLostReplyProbe(t *testing.T, f *fleet, n int) *lostReplyProbe {
	t.Helper()
	p := &lostReplyProbe{lc: f.replicas[0], n: n}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		res, err := p.lc.Acquire(ctx, &lockdv1.AcquireRequest{
			Key: "probe/reentry/" + strconv.Itoa(i), Owner: "probe-" + strconv.Itoa(i), Ttl: durationpb.New(probeTTL),
		})
		if err != nil || !res.GetAcquired() {
			t.Fatalf("probe lease %d: %v, %v", i, res, err)
		}
		p.reentry = append(p.reentry, res.GetLease())
	}
	return p
}

// fire makes the probe calls; Redis must be frozen.
func (p *lostReplyProbe) fire(t *testing.T) {
	t.Helper()
	p.round++
	done := make(chan string, 2*p.n)
	for i := range p.n {
		key := fmt.Sprintf("probe/fresh/%d/%d", p.round, i)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
			defer cancel()
			res, err := p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Ttl: durationpb.New(probeTTL)})
			switch {
			case err != nil:
				done <- key
			case res.GetAcquired():
				// The reply came after all: a real lease; give it back.
				bg, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = p.lc.Release(bg, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()})
				done <- ""
			default:
				done <- ""
			}
		}()
		l := p.reentry[i]
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeDeadline)
			defer cancel()
			_, _ = p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: l.GetKey(), Owner: l.GetOwner(), Ttl: durationpb.New(probeTTL)})
			done <- ""
		}()
	}
	for range 2 * p.n {
		if key := <-done; key != "" {
			p.fresh = append(p.fresh, key)
		}
	}
}

// check runs once Redis answers again. It waits (bounded) until no lease
// of a failed fresh Acquire is held any more, then releases each
// re-entered lease once, as its owner whose re-entry failed would, and
// expects it to end. It returns the violations.
func (p *lostReplyProbe) check(t *testing.T) []string {
	t.Helper()
	var bad []string
	deadline := time.Now().Add(undoTimeout)
	var held []string
	for {
		held = held[:0]
		for _, key := range p.fresh {
			if p.isHeld(t, key) {
				held = append(held, key)
			}
		}
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, key := range held {
		bad = append(bad, fmt.Sprintf("key %q: an Acquire without request_id whose reply was lost left a lease held by nobody (%v after Redis answered again)", key, undoTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, l := range p.reentry {
		res, err := p.lc.Release(ctx, &lockdv1.ReleaseRequest{Key: l.GetKey(), LeaseId: l.GetLeaseId()})
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("key %q: releasing a held lease: %v", l.GetKey(), err))
		case res.GetHoldCount() != 0:
			bad = append(bad, fmt.Sprintf("key %q: a re-entry whose reply was lost left %d extra holds: the owner's one Release left the key locked", l.GetKey(), res.GetHoldCount()))
		}
	}
	return bad
}

// isHeld reports whether someone holds key, by trying to take it (and
// giving it back at once if that worked).
func (p *lostReplyProbe) isHeld(t *testing.T, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: key, Owner: "probe-checker", Ttl: durationpb.New(time.Second)})
	if err != nil {
		t.Fatalf("checking %q: %v", key, err)
	}
	if !res.GetAcquired() {
		return true
	}
	if _, err := p.lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: res.GetLease().GetLeaseId()}); err != nil {
		t.Fatalf("releasing %q: %v", key, err)
	}
	return false
}
