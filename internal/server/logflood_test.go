package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// TestCallersCannotFloodTheWarnLog: calls that end at a limit
// (RESOURCE_EXHAUSTED) or UNAVAILABLE log at WARN, and anyone (every
// caller, with auth off) can make such calls as fast as lockd answers
// them. The first is logged in full at once; the like of it (same method,
// code and client) at most once per interval, with how many were not.
func TestCallersCannotFloodTheWarnLog(t *testing.T) {
	t.Parallel()
	r := start(t, Config{Redis: redistest.Start(t).Addr(), Bounds: boundsWith(0, 1)})
	lc := lockdv1.NewLockServiceClient(r.conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "flood/held"})
	if err != nil {
		t.Fatal(err)
	}
	open, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "flood/held", LeaseId: l.GetLease().GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Recv(); err != nil {
		t.Fatal(err)
	}
	const refused = 200
	for range refused {
		s, err := lc.KeepAlive(ctx, &lockdv1.KeepAliveRequest{Key: "flood/other", LeaseId: "AAAAAAAAAAAAAAAAAAAAAA"})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a KeepAlive beyond --max-keepalives: %v, want RESOURCE_EXHAUSTED", err)
		}
	}
	var warned int
	for _, line := range r.logs.Lines() {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "KeepAlive") && strings.Contains(line, "ResourceExhausted") {
			warned++
		}
	}
	if warned == 0 || warned > 2 {
		t.Errorf("%d calls refused at a limit wrote %d WARN lines, want one (and at most one more per interval)", refused, warned)
	}
}

// TestSamplerCountsWhatItHoldsBack: the first of a kind at once, then one
// per interval with the count of those held back; kinds apart.
func TestSamplerCountsWhatItHoldsBack(t *testing.T) {
	t.Parallel()
	s := newSampler(10 * time.Second)
	t0 := time.Unix(1000, 0)
	type step struct {
		kind    string
		at      time.Duration
		ok      bool
		skipped int
	}
	for i, st := range []step{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0},
		{"a", 9 * time.Second, false, 0},
		{"a", 10 * time.Second, true, 2},
		{"a", 11 * time.Second, false, 0},
		{"a", 30 * time.Second, true, 1},
		{"a", 45 * time.Second, true, 0},
	} {
		ok, skipped := s.allow(st.kind, t0.Add(st.at))
		if ok != st.ok || skipped != st.skipped {
			t.Errorf("step %d (%s at %v): %v, %d; want %v, %d", i, st.kind, st.at, ok, skipped, st.ok, st.skipped)
		}
	}
}
