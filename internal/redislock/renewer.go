package redislock

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxBatch bounds the renewals sent in one pipeline.
	maxBatch = 1000
	// maxEarly bounds how early a renewal may go out to join a batch.
	maxEarly = time.Second
	// renewTimeout bounds one batch's round trip.
	renewTimeout = 5 * time.Second
)

// renewer sends the KeepAlive renewals of all leases of a Client. Renewals
// that fall due close together go out in one pipeline per Redis node, so ten
// thousand kept-alive leases cost a few round trips a second rather than
// thousands; each renewal is still one script call. The pipelines of one
// batch go out concurrently and each delivers its results as soon as its
// node answers, so a stalled node delays only the leases it holds.
type renewer struct {
	c *Client
	// base ends the round trips still out when the renewer closes.
	base       context.Context
	cancelBase context.CancelFunc

	mu      sync.Mutex
	queue   renewalQueue
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
	flushes sync.WaitGroup
}

// errEnded is a renewal's outcome when its Keeper's end channel closed
// (see Keeper.EndOn).
var errEnded = errors.New("redislock: keepalive ended")

// renewal is one scheduled renewal.
type renewal struct {
	key, id  string
	ks       keySet
	ttl      time.Duration // 0 keeps the lease's own
	keeper   string        // the renewing Keeper
	register bool          // make keeper the lease's newest
	due      time.Time
	early    time.Duration // how much earlier it may go to join a batch
	until    time.Time     // when the caller stops waiting; zero: when ctx ends
	result   chan renewResult
	dropped  atomic.Bool
	index    int
	// notified is set when a notice came while the renewal waited (see
	// renew): it may have come after the renewal went out.
	notified bool
	// answered is set when the outcome came: the renewal is out of the
	// queue and its batch, and may be renewed again.
	answered bool
	timer    *time.Timer // the wait's, kept for the next renewal
}

type renewResult struct {
	lease Lease
	sent  time.Time // when the batch went out: Redis ran the script after
	err   error
}

func newRenewer(c *Client) *renewer {
	r := &renewer{c: c, wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	r.base, r.cancelBase = context.WithCancel(context.Background())
	go r.run()
	return r
}

// renew schedules rn at rn.due (or up to rn.early before it, to join a
// batch) and waits for its outcome, until ctx ends, rn.until (if set)
// passes, or end is closed (errEnded), whichever comes first. A value on
// notice (nil: none comes) makes rn due at once if it still waits to go
// out, and sets rn.notified. Thousands of KeepAlives wait here at once:
// the wait costs a timer, not a context or a goroutine of its own. A
// renewal whose outcome came (rn.answered) may be renewed again, with its
// channel and timer.
func (r *renewer) renew(ctx context.Context, rn *renewal, notice, end <-chan struct{}) renewResult {
	rn.early = min(rn.early, maxEarly)
	rn.notified, rn.answered = false, false
	if rn.result == nil {
		rn.result = make(chan renewResult, 1)
	}
	if d, ok := ctx.Deadline(); ok && (rn.until.IsZero() || d.Before(rn.until)) {
		rn.until = d
	}
	var expired <-chan time.Time
	if !rn.until.IsZero() {
		if rn.timer == nil {
			rn.timer = time.NewTimer(time.Until(rn.until))
		} else {
			rn.timer.Reset(time.Until(rn.until))
		}
		defer rn.timer.Stop()
		expired = rn.timer.C
	}
	r.mu.Lock()
	heap.Push(&r.queue, rn)
	first := r.queue[0] == rn
	r.mu.Unlock()
	if first {
		r.poke()
	}
	for {
		select {
		case res := <-rn.result:
			rn.answered = true
			return res
		case <-notice:
			rn.notified = true
			r.rushOne(rn)
		case <-ctx.Done():
			r.drop(rn)
			return renewResult{err: ctx.Err()}
		case <-expired:
			r.drop(rn)
			return renewResult{err: context.DeadlineExceeded}
		case <-end:
			r.drop(rn)
			return renewResult{err: errEnded}
		case <-r.stopped:
			return renewResult{err: ErrClosed}
		}
	}
}

// drop takes rn out of the queue, or out of the batch it joined.
func (r *renewer) drop(rn *renewal) {
	rn.dropped.Store(true)
	r.mu.Lock()
	if rn.index >= 0 && rn.index < len(r.queue) && r.queue[rn.index] == rn {
		heap.Remove(&r.queue, rn.index)
	}
	r.mu.Unlock()
}

func (r *renewer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// rushOne makes rn due now if it waits in the queue: its KeepAlive learns
// at once whether its lease is still held.
func (r *renewer) rushOne(rn *renewal) {
	r.mu.Lock()
	if rn.index >= 0 && rn.index < len(r.queue) && r.queue[rn.index] == rn {
		if now := time.Now(); rn.due.After(now) {
			rn.due = now
			heap.Fix(&r.queue, rn.index)
		}
	}
	r.mu.Unlock()
	r.poke()
}

// rush makes every scheduled renewal due now: after Redis lost data, each
// KeepAlive learns at once whether its lease survived.
func (r *renewer) rush() {
	now := time.Now()
	r.mu.Lock()
	for _, rn := range r.queue {
		if rn.due.After(now) {
			rn.due = now
		}
	}
	heap.Init(&r.queue)
	r.mu.Unlock()
	r.poke()
}

func (r *renewer) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		wait := time.Hour
		if len(r.queue) > 0 {
			wait = time.Until(r.queue[0].due)
		}
		r.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-r.stopped:
				return
			case <-r.wake:
				continue
			case <-timer.C:
			}
		}
		r.flush(r.ripe())
	}
}

// ripe takes the renewals that are due, with those close enough to due to
// join them.
func (r *renewer) ripe() []*renewal {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var batch []*renewal
	for len(r.queue) > 0 && len(batch) < maxBatch {
		next := r.queue[0]
		if next.due.Sub(now) > next.early {
			break
		}
		heap.Pop(&r.queue)
		if !next.dropped.Load() {
			batch = append(batch, next)
		}
	}
	return batch
}

// flush splits a batch by the Redis node holding each lease and sends each
// part on its own, concurrently.
func (r *renewer) flush(batch []*renewal) {
	if len(batch) == 0 {
		return
	}
	groups := map[string][]*renewal{}
	if cc := r.c.cluster; cc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
		for _, rn := range batch {
			addr := ""
			if node, err := cc.MasterForKey(ctx, rn.ks.record); err == nil {
				addr = node.Options().Addr
			}
			groups[addr] = append(groups[addr], rn)
		}
		cancel()
	} else {
		groups[""] = batch
	}
	for addr, group := range groups {
		r.flushes.Add(1)
		go func() {
			defer r.flushes.Done()
			r.send(addr, group)
		}()
	}
}

// send sends one node's renewals in one pipeline and hands out the
// results. Scripts missing from a Redis that restarted are loaded and the
// renewals retried once.
func (r *renewer) send(addr string, group []*renewal) {
	// The round trip ends at the first deadline of the callers waiting on
	// it: a lease whose renewal cannot be confirmed in time is given up.
	until := time.Now().Add(renewTimeout)
	for _, rn := range group {
		if !rn.until.IsZero() && rn.until.Before(until) {
			until = rn.until
		}
	}
	ctx, cancel := context.WithDeadline(r.base, until)
	defer cancel()
	sent := time.Now()
	cmds, waitErr := r.c.pipelineRenewals(ctx, addr, group)
	for i, rn := range group {
		res := renewResult{sent: sent}
		reply, err := cmds[i].Slice()
		if err == nil {
			r.c.notePause(rn.ks, reply)
		}
		switch {
		case err != nil:
			res.err = err
		case status(reply) != 1:
			res.err = notHeld(rn.key)
		case waitErr != nil:
			res.err = waitErr
		default:
			res.lease, res.err = parseLease(rn.key, reply)
		}
		rn.result <- res
	}
}

func (rn *renewal) args() []any {
	register := "0"
	if rn.register {
		register = "1"
	}
	return []any{rn.id, rn.ttl.Milliseconds(), rn.keeper, register}
}

func (r *renewer) close() {
	close(r.stopped)
	<-r.done
	r.cancelBase()
	r.flushes.Wait()
}

// renewalQueue is a min-heap of renewals by due time.
type renewalQueue []*renewal

func (q renewalQueue) Len() int           { return len(q) }
func (q renewalQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q renewalQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *renewalQueue) Push(x any) {
	rn := x.(*renewal)
	rn.index = len(*q)
	*q = append(*q, rn)
}

func (q *renewalQueue) Pop() any {
	old := *q
	n := len(old)
	rn := old[n-1]
	old[n-1] = nil
	rn.index = -1
	*q = old[:n-1]
	return rn
}
