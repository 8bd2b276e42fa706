package faults

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// pausedRun runs clients that renew their leases with Renew calls; the
// first hold of client 0 that writes stalls mid-write until the fenced
// resource accepted a higher token for its key (or a minute passed). With
// ignoreFencing the resource accepts every write.
func pausedRun(t *testing.T, name string, ignoreFencing bool) *Result {
	t.Helper()
	srv := redistest.Start(t)
	f := startFleet(t, 2, "--redis="+srv.Addr())
	w := defaultWorkload("paused")
	w.TTL = 500 * time.Millisecond
	w.Writes, w.Step = 4, 50*time.Millisecond
	w.Renew = true
	var (
		pauses  atomic.Int32
		resumed = make(chan struct{})
		run     *Run
	)
	w.Pause = func(h *Held) {
		if h.Client.ID != 0 || pauses.Add(1) > int32(scaled(1, 3)) {
			return
		}
		defer func() { resumed <- struct{}{} }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for run.Fenced.Highest(h.Key) <= h.Token {
			select {
			case <-run.Fenced.AcceptedAbove(h.Key, h.Token):
			case <-ctx.Done():
				return
			}
		}
	}
	fault := "a client stalls mid-write, its renewals too, until another holder of the key wrote"
	if ignoreFencing {
		fault += "; the resource ignores fencing tokens"
	}
	s := scenario{
		name: name, fault: fault, workload: w, replicas: f.replicas, rdb: srv.Client(t), control: ignoreFencing,
		inject: func(t *testing.T, run *Run, round int) []Window {
			select {
			case <-resumed:
			case <-time.After(2 * time.Minute):
				t.Fatal("the paused client never resumed")
			}
			return nil
		},
	}
	s.prepare = func(r *Run) {
		run = r
		r.Fenced.Ignore = ignoreFencing
	}
	return s.run(t)
}
