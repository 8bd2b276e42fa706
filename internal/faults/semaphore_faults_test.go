package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// semLimit is the semaphores' limit in the permit scenarios.
const semLimit = 3

// semaphores returns the fleet's replicas' SemaphoreService, in the order
// of the replicas.
func (f *fleet) semaphores(t *testing.T) []lockdv1.SemaphoreServiceClient {
	t.Helper()
	var sems []lockdv1.SemaphoreServiceClient
	for _, p := range f.procs {
		sems = append(sems, lockdv1.NewSemaphoreServiceClient(p.Dial(t)))
	}
	return sems
}

// TestSemaphoreRedisFrozen runs permits instead of locks (clients take
// one of 3 permits of one of two keys, keep it alive with KeepAlive and
// release it) and freezes Redis with SIGSTOP for longer than the permits'
// ttl: never more than 3 permits of a key are held at once, every holder
// learns its permit is lost before a permit beyond the limit is granted,
// and fencing tokens rise per key. The same history checked against a
// limit of 2 must show permits over that limit: the run filled its
// semaphores.
func TestSemaphoreRedisFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	sems := f.semaphores(t)
	w := defaultWorkload("sem")
	w.Keys = w.Keys[:2] // 12 clients on 6 permits: the semaphores stay full
	w.Clients = 0       // semaphore clients instead, started by prepare
	var events []Event
	res := scenario{
		name: "semaphore's Redis frozen", fault: fmt.Sprintf("permits (SemaphoreService, limit %d) instead of locks; SIGSTOP Redis for %v (ttl %v)", semLimit, 3*w.TTL, w.TTL),
		workload: w, replicas: f.replicas, rdb: srv.Client(t),
		prepare: func(run *Run) { run.StartPermits(scaled(12, 24), semLimit, sems) },
		inject: func(t *testing.T, run *Run, round int) []Window {
			srv.Freeze()
			time.Sleep(3 * w.TTL)
			srv.Thaw()
			return nil
		},
		after: func(t *testing.T, run *Run) []string {
			events = run.History.Events()
			return nil
		},
	}.run(t)
	expectClean(t, res)
	lost := 0
	for _, e := range events {
		if e.Op == OpLost || e.Op == OpAbandon {
			lost++
		}
	}
	if lost == 0 {
		t.Errorf("no permit was lost (told or given up): the freeze cost no permit")
	}
	if lower := CheckPermits(events, semLimit-1, nil); len(lower.OverLimit) == 0 {
		t.Errorf("checked against a limit of %d, the run shows no permit over it: the semaphores were never full", semLimit-1)
	}
}

// TestSemaphoreNegativeOverLimit takes all 3 permits of a key from lockd,
// checks that a fourth is refused, and feeds the history to the permit
// checker with a limit of 2: a history with limit+1 permits held at once,
// which the checker must report.
func TestSemaphoreNegativeOverLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	f := startFleet(t, 1, "--redis="+srv.Addr())
	sems := f.semaphores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "semneg/0"
	o := AcquireOptions{TTL: 10 * time.Second}

	run := NewRun(Workload{}, f.replicas)
	var held []*Held
	for id := range semLimit {
		h, err := run.NewClient(id, 0, fmt.Sprintf("client-%d", id), f.replicas).AcquirePermit(ctx, sems, key, semLimit, o)
		if err != nil || h == nil {
			t.Fatalf("permit %d: %v, %v", id, h, err)
		}
		held = append(held, h)
	}
	if h, err := run.NewClient(semLimit, 0, "one-too-many", f.replicas).AcquirePermit(ctx, sems, key, semLimit, o); err != nil || h != nil {
		t.Fatalf("a permit beyond the limit: %v, %v", h, err)
	}
	for _, h := range held {
		if _, err := h.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if res := CheckPermits(run.History.Events(), semLimit, nil); len(res.Violations()) > 0 {
		t.Errorf("with the limit lockd enforced: %q", res.Violations())
	}
	res := CheckPermits(run.History.Events(), semLimit-1, nil)
	report.Add("control: permits over the limit", fmt.Sprintf("%d permits taken from lockd with limit %d, checked against a limit of %d", semLimit, semLimit, semLimit-1), res, true)
	if len(res.OverLimit) != 1 {
		t.Errorf("the checker found %d permits over the limit, want 1 (the third): %q", len(res.OverLimit), res.Violations())
	}
}
