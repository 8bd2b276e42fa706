package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Workload is what the clients of a run do: each, in a loop, takes the
// write lock of one of Keys (waiting up to Wait), keeps it alive (a
// KeepAlive stream, or Renew calls), writes Writes times to the key's
// resources, and releases it.
type Workload struct {
	Keys    []string
	Clients int
	TTL     time.Duration
	Wait    time.Duration
	Writes  int
	Step    time.Duration // time inside the resources per write
	// Renew keeps leases alive with Renew calls from the client's own loop
	// (a client whose pauses stop its renewals too) instead of KeepAlive.
	Renew bool
	// Reenter makes every hold re-enter its lease once, as nested code
	// would, with a ttl a tenth of TTL, and give that hold back.
	Reenter bool
	// Pause, if set, is called in the middle of every write (between
	// entering the plain resource and writing to the fenced one).
	Pause func(h *Held)
	// Elect makes every hold a leadership: the client campaigns for the
	// key as an election's name instead of locking it (see election.go);
	// Run.Elections must be set.
	Elect bool
}

// Run is one run of a workload against a fleet of lockd replicas, with its
// history and resources.
type Run struct {
	History History
	Fenced  Fenced
	Plain   Plain
	// Elections are the replicas' ElectionService, in the order of the
	// replicas, for an election workload.
	Elections []lockdv1.ElectionServiceClient

	w        Workload
	replicas []lockdv1.LockServiceClient
	ctx      context.Context
	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup
	holds    atomic.Int64
	progress chan struct{} // signalled after every hold
	elected  atomic.Int64
	electedC chan struct{} // signalled after every election won
	// permitLimit is the semaphores' limit of a permit workload (see
	// StartPermits), 0 for locks.
	permitLimit int
}

// NewRun returns a run of w on replicas; nothing happens until Start.
func NewRun(w Workload, replicas []lockdv1.LockServiceClient) *Run {
	ctx, cancel := context.WithCancel(context.Background())
	return &Run{w: w, replicas: replicas, ctx: ctx, cancel: cancel, progress: make(chan struct{}, 1), electedC: make(chan struct{}, 1)}
}

// Start starts the clients.
func (r *Run) Start() {
	for id := range r.w.Clients {
		c := r.NewClient(id, id, fmt.Sprintf("client-%d", id), r.replicas)
		c.elections = r.Elections
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if r.w.Elect {
				r.campaignLoop(c)
				return
			}
			r.loop(c)
		}()
	}
}

// Stop asks the clients to finish their holds and waits until they have
// released them. Calls still waiting for a lock end at once.
func (r *Run) Stop() {
	r.stopping.Store(true)
	r.wg.Wait()
	r.cancel()
}

// Holds returns how many holds the clients have completed.
func (r *Run) Holds() int64 { return r.holds.Load() }

// WaitHolds waits until the clients have completed n holds in all, and
// reports false if timeout passed first. It is for moving a scenario on
// once the run has made progress, never an assertion on speed.
func (r *Run) WaitHolds(n int64, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for r.holds.Load() < n {
		select {
		case <-r.progress:
		case <-deadline:
			return false
		}
	}
	return true
}

// Elected returns how many leaderships the clients of an election
// workload have won.
func (r *Run) Elected() int64 { return r.elected.Load() }

// WaitElected waits until the clients of an election workload have won n
// leaderships in all, and reports false if timeout passed first. A fault
// injected once it returns finds a leader just elected, still leading.
func (r *Run) WaitElected(n int64, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for r.elected.Load() < n {
		select {
		case <-r.electedC:
		case <-deadline:
			return false
		}
	}
	return true
}

// Check checks the run's history; see [Check], or [CheckPermits] for a
// permit workload.
func (r *Run) Check(windows ...Window) *Result {
	if r.permitLimit > 0 {
		return CheckPermits(r.History.Events(), r.permitLimit, windows)
	}
	return Check(r.History.Events(), r.Fenced.Log(), r.Plain.Overlaps(), windows)
}

func (r *Run) loop(c *Client) {
	rnd := rand.New(rand.NewPCG(uint64(c.ID), 7))
	for !r.stopping.Load() {
		key := r.w.Keys[rnd.IntN(len(r.w.Keys))]
		h, err := c.Acquire(r.ctx, key, AcquireOptions{TTL: r.w.TTL, Wait: r.w.Wait})
		if err != nil || h == nil {
			if err != nil {
				time.Sleep(retryBackoff)
			}
			continue
		}
		r.hold(h)
		r.holds.Add(1)
		select {
		case r.progress <- struct{}{}:
		default:
		}
	}
}

// hold keeps, uses and releases one lease.
func (r *Run) hold(h *Held) {
	kctx, stopKeeping := context.WithCancel(r.ctx)
	kept := make(chan struct{})
	if r.w.Renew {
		close(kept)
	} else {
		go func() {
			defer close(kept)
			h.KeepAlive(kctx, KeepAliveOptions{})
		}()
	}
	var pause func()
	if r.w.Pause != nil {
		pause = func() { r.w.Pause(h) }
	}
	lastRenew := time.Now()
	for i := 0; i < r.w.Writes; {
		if r.w.Renew && time.Since(lastRenew) > h.TTL/3 {
			lastRenew = time.Now()
			if !h.Renew(r.ctx) {
				break
			}
		}
		if h.Write(r.ctx, r.w.Step, pause) {
			if r.w.Reenter && i == 0 {
				if n := h.Reenter(r.ctx, r.w.TTL/10); n > 1 {
					_, _ = h.Release(r.ctx, false)
				}
			}
			i++
			continue
		}
		// Too close to the known expiry to write: wait for lockd's news
		// (a renewal, or the loss), keeping the stream open, as a holder
		// that has work left does. With no news at all by well past the
		// expiry, give the lease up.
		select {
		case <-h.Lost():
		default:
			if r.w.Renew {
				lastRenew = time.Time{}
				time.Sleep(retryBackoff)
				if time.Since(h.Expire()) < 2*h.TTL {
					continue
				}
			} else if h.AwaitNews(r.ctx, time.Until(h.Expire())+2*h.TTL) {
				continue
			}
			r.History.Add(Event{Op: OpAbandon, Client: h.Client.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: time.Now()})
			h.markLost()
		}
		break
	}
	stopKeeping()
	<-kept
	select {
	case <-h.Lost():
		return // lockd said it is gone, or it ran out unseen
	default:
	}
	_, _ = h.Release(r.ctx, true)
}
