package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Semaphore workloads. Each client, in a loop, takes a permit
// (SemaphoreService.Acquire with the run's limit) of one of the workload's
// keys, keeps it alive with KeepAlive streams for 1 to 2×Writes steps of
// Step (at random, so that holds do not end in step), and releases it (LockService.Release), as run.go's clients do with
// locks. Permits are recorded as read holds; [CheckPermits] checks them.

// StartPermits starts n semaphore clients of the run's workload (instead
// of Start's lock clients: set the workload's Clients to 0), each on the
// replicas' SemaphoreService in the order of the replicas, taking permits
// of limit. From then on the run's Check is [CheckPermits].
func (r *Run) StartPermits(n int, limit uint32, sems []lockdv1.SemaphoreServiceClient) {
	r.permitLimit = int(limit)
	for id := range n {
		c := r.NewClient(id, id, fmt.Sprintf("client-%d", id), r.replicas)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(c.ID), 11))
			for !r.stopping.Load() {
				key := r.w.Keys[rnd.IntN(len(r.w.Keys))]
				h, err := c.AcquirePermit(r.ctx, sems, key, limit, AcquireOptions{TTL: r.w.TTL, Wait: r.w.Wait})
				if err != nil || h == nil {
					if err != nil {
						time.Sleep(retryBackoff)
					}
					continue
				}
				r.holdPermit(h, 1+rnd.IntN(2*r.w.Writes))
				r.holds.Add(1)
				select {
				case r.progress <- struct{}{}:
				default:
				}
			}
		}()
	}
}

// AcquirePermit asks for a permit of key with limit on the SemaphoreService
// of the client's replica (sems in the order of the replicas) and records
// every attempt, retrying with the same request_id on the next replica as
// Acquire does. It returns nil without an error when no permit came free
// in time.
func (c *Client) AcquirePermit(ctx context.Context, sems []lockdv1.SemaphoreServiceClient, key string, limit uint32, o AcquireOptions) (*Held, error) {
	reqID := newID()
	var err error
	for range acquireAttempts {
		c.mu.Lock()
		sem := sems[c.cur]
		c.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, o.Wait+3*time.Second)
		call := time.Now()
		var res *lockdv1.SemaphoreServiceAcquireResponse
		res, err = sem.Acquire(cctx, &lockdv1.SemaphoreServiceAcquireRequest{
			Key: key, Limit: limit, Owner: c.Owner, Ttl: durationpb.New(o.TTL), WaitTimeout: durationpb.New(o.Wait), RequestId: reqID,
		})
		cancel()
		e := Event{Op: OpAcquire, Client: c.ID, Key: key, Call: call, Return: time.Now()}
		if err != nil {
			e.Err = status.Code(err).String()
			c.run.History.Add(e)
			c.failover(err)
			if ctx.Err() != nil {
				return nil, err
			}
			time.Sleep(retryBackoff)
			continue
		}
		if !res.GetAcquired() {
			c.run.History.Add(e)
			return nil, nil
		}
		l := res.GetLease()
		e.OK, e.Lease, e.Token, e.Expire = true, l.GetLeaseId(), l.GetFencingToken(), l.GetExpireTime().AsTime()
		c.run.History.Add(e)
		return &Held{Client: c, Key: key, Lease: e.Lease, Token: e.Token, TTL: o.TTL, expire: e.Expire, lostC: make(chan struct{})}, nil
	}
	return nil, err
}

// holdPermit keeps a permit alive for steps steps of Step while it stays
// valid, as hold does with a lock (waiting for lockd's news when too close
// to its expiry, giving it up with none), then releases it unless it was
// lost. A permit writes to no resource: the resources serve one holder at
// a time.
func (r *Run) holdPermit(h *Held, steps int) {
	kctx, stopKeeping := context.WithCancel(r.ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		h.KeepAlive(kctx, KeepAliveOptions{})
	}()
	for i := 0; i < steps; {
		if h.Valid(2 * r.w.Step) {
			select {
			case <-r.ctx.Done():
			case <-time.After(r.w.Step):
			}
			i++
			continue
		}
		select {
		case <-h.Lost():
		default:
			if h.AwaitNews(r.ctx, time.Until(h.Expire())+2*h.TTL) {
				continue
			}
			r.History.Add(Event{Op: OpAbandon, Client: h.Client.ID, Key: h.Key, Lease: h.Lease, Call: time.Now()})
			h.markLost()
		}
		break
	}
	stopKeeping()
	<-kept
	select {
	case <-h.Lost():
		return
	default:
	}
	_, _ = h.Release(r.ctx, true)
}
