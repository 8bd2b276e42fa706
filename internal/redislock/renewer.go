package redislock

import (
	"container/heap"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
// that fall due close together go out in one pipeline (on Cluster, go-redis
// splits it into one round trip per node), so ten thousand kept-alive leases
// cost a few round trips a second rather than thousands. Each renewal is
// still one script call.
type renewer struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	queue   renewalQueue
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
}

// renewal is one scheduled renewal.
type renewal struct {
	key, id string
	ks      keySet
	ttl     time.Duration // 0 keeps the lease's own
	due     time.Time
	early   time.Duration // how much earlier it may go to join a batch
	until   time.Time     // when the caller stops waiting; zero: never
	result  chan renewResult
	dropped atomic.Bool
	index   int
}

type renewResult struct {
	lease Lease
	sent  time.Time // when the batch went out: Redis ran the script after
	err   error
}

func newRenewer(rdb redis.UniversalClient) *renewer {
	r := &renewer{rdb: rdb, wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// renew schedules a renewal at due (or up to early before it, to join a
// batch) and waits for its outcome.
func (r *renewer) renew(ctx context.Context, ks keySet, key, id string, ttl, early time.Duration, due time.Time) renewResult {
	rn := &renewal{key: key, id: id, ks: ks, ttl: ttl, due: due, early: min(early, maxEarly), result: make(chan renewResult, 1)}
	rn.until, _ = ctx.Deadline()
	r.mu.Lock()
	heap.Push(&r.queue, rn)
	first := r.queue[0] == rn
	r.mu.Unlock()
	if first {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	select {
	case res := <-rn.result:
		return res
	case <-ctx.Done():
		rn.dropped.Store(true)
		r.mu.Lock()
		if rn.index >= 0 && rn.index < len(r.queue) && r.queue[rn.index] == rn {
			heap.Remove(&r.queue, rn.index)
		}
		r.mu.Unlock()
		return renewResult{err: ctx.Err()}
	case <-r.stopped:
		return renewResult{err: ErrClosed}
	}
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

// flush sends a batch in one pipeline and hands out the results. Scripts
// missing from a Redis that restarted are loaded and the batch retried once.
func (r *renewer) flush(batch []*renewal) {
	if len(batch) == 0 {
		return
	}
	// The round trip ends at the first deadline of the callers waiting on
	// it: a lease whose renewal cannot be confirmed in time is given up.
	until := time.Now().Add(renewTimeout)
	for _, rn := range batch {
		if !rn.until.IsZero() && rn.until.Before(until) {
			until = rn.until
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	sent := time.Now()
	cmds := r.send(ctx, batch)
	r.resendMissing(ctx, batch, cmds)
	for i, rn := range batch {
		res := renewResult{sent: sent}
		reply, err := cmds[i].Slice()
		switch {
		case err != nil:
			res.err = err
		case status(reply) != 1:
			res.err = notHeld(rn.key)
		default:
			res.lease, res.err = parseLease(rn.key, reply)
		}
		rn.result <- res
	}
}

func (r *renewer) send(ctx context.Context, batch []*renewal) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(batch))
	pipe := r.rdb.Pipeline()
	for i, rn := range batch {
		cmds[i] = renewScript.EvalSha(ctx, pipe, rn.keys(), rn.id, rn.ttl.Milliseconds())
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// resendMissing sends again, with the script's text, the renewals that met
// a Redis without the script cached (restarted, or a replica promoted on
// failover); EVAL caches it there for the next batch.
func (r *renewer) resendMissing(ctx context.Context, batch []*renewal, cmds []*redis.Cmd) {
	var pipe redis.Pipeliner
	for i, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			if pipe == nil {
				pipe = r.rdb.Pipeline()
			}
			cmds[i] = renewScript.Eval(ctx, pipe, batch[i].keys(), batch[i].id, batch[i].ttl.Milliseconds())
		}
	}
	if pipe != nil {
		_, _ = pipe.Exec(ctx)
	}
}

func (rn *renewal) keys() []string {
	return []string{rn.ks.state, rn.ks.holders, rn.ks.writers}
}

func (r *renewer) close() {
	close(r.stopped)
	<-r.done
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
