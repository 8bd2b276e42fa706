package faults

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// Elections. With Workload.Elect, each client campaigns (ElectionService)
// for one of the keys as an election's name instead of taking its lock: a
// leadership is the write lease of the name, its term the lease's fencing
// token, so the history records it as a lease — the first Campaign message
// is the grant, each later one a renewal, NOT_FOUND the loss, and closing
// the stream (which resigns) the final release — and the checker holds
// elections to the lock contract: one leader at a time, the leader told of
// its loss before anyone else is elected, terms fencing its writes.

// election returns the client's replica as an ElectionService client.
func (c *Client) election() lockdv1.ElectionServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elections[c.cur]
}

// leadership is a Held won by a Campaign stream, and the stream.
type leadership struct {
	*Held
	closeStream func()
	ended       chan struct{}
}

// Campaign campaigns for key on the client's replica until elected, ctx
// ends, or the stream fails before the election (nil then). claim is
// asked once elected: false means the client gave up waiting meanwhile
// (and is cancelling ctx), so it does not lead. Once elected, the stream is
// read in the background: renewals and the loss are recorded on the Held.
func (c *Client) Campaign(ctx context.Context, key string, ttl time.Duration, claim func() bool) *leadership {
	sctx, cancel := context.WithCancel(ctx)
	call := time.Now()
	st, err := c.election().Campaign(sctx, &lockdv1.CampaignRequest{Name: key, Owner: c.Owner, Ttl: durationpb.New(ttl)})
	var msg *lockdv1.CampaignResponse
	if err == nil {
		msg, err = st.Recv()
	}
	if err == nil && !claim() {
		cancel() // resigns
		return nil
	}
	e := Event{Op: OpAcquire, Client: c.ID, Key: key, Write: true, Call: call, Return: time.Now()}
	if err != nil {
		cancel()
		if ctx.Err() == nil {
			e.Err = status.Code(err).String()
			c.run.History.Add(e)
			c.failover(err)
		}
		return nil
	}
	l := msg.GetLeader()
	e.OK, e.Lease, e.Token, e.Expire, e.TTL = true, l.GetLeaseId(), l.GetTerm(), l.GetExpireTime().AsTime(), ttl
	c.run.History.Add(e)
	c.run.History.Add(Event{Op: OpWatch, Client: c.ID, Key: key, Lease: e.Lease, Write: true, Call: call, Return: e.Return})
	h := &Held{Client: c, Key: key, Lease: e.Lease, Token: e.Token, TTL: ttl, expire: e.Expire, lostC: make(chan struct{})}
	lead := &leadership{Held: h, ended: make(chan struct{})}
	closing := make(chan struct{})
	lead.closeStream = func() {
		// From here on the holder no longer claims the leadership: closing
		// the stream resigns it.
		c.run.History.Add(Event{Op: OpRelease, Client: c.ID, Key: key, Lease: h.Lease, Write: true, Call: time.Now(), Final: true, Async: true})
		close(closing)
		cancel()
		<-lead.ended
	}
	go func() {
		defer close(lead.ended)
		for {
			msg, err := st.Recv()
			now := time.Now()
			switch {
			case err == nil:
				exp := msg.GetLeader().GetExpireTime().AsTime()
				c.run.History.Add(Event{Op: OpRenew, Client: c.ID, Key: key, Lease: h.Lease, Write: true, Call: now, Expire: exp, TTL: ttl})
				h.renewed(exp)
				continue
			case status.Code(err) == codes.NotFound:
				c.run.History.Add(Event{Op: OpLost, Client: c.ID, Key: key, Lease: h.Lease, Write: true, Call: now})
				h.markLost()
			default:
				select {
				case <-closing:
				default:
					// The stream broke without news: the holder stops
					// leading at once (campaigning again would resume it).
					c.run.History.Add(Event{Op: OpUnwatch, Client: c.ID, Key: key, Lease: h.Lease, Write: true, Call: now, Err: status.Code(err).String()})
					c.run.History.Add(Event{Op: OpAbandon, Client: c.ID, Key: key, Lease: h.Lease, Write: true, Call: now})
					h.markLost()
					c.failover(err)
				}
			}
			return
		}
	}()
	return lead
}

// campaignLoop is loop for an election workload: the client campaigns for
// a random key, leads (writes Writes times with its term), and resigns.
func (r *Run) campaignLoop(c *Client) {
	rnd := rand.New(rand.NewPCG(uint64(c.ID), 7))
	for !r.stopping.Load() {
		key := r.w.Keys[rnd.IntN(len(r.w.Keys))]
		// A campaign waits until elected: it gives up waiting once the run
		// stops (checked every Wait), never once elected.
		cctx, stopWaiting := context.WithCancel(r.ctx)
		var (
			mu    sync.Mutex
			state int // 0 waiting, 1 elected, 2 gave up
		)
		claim := func() bool {
			mu.Lock()
			defer mu.Unlock()
			if state == 0 {
				state = 1
			}
			return state == 1
		}
		decided := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				select {
				case <-decided:
					return
				case <-time.After(r.w.Wait):
				}
				if r.stopping.Load() {
					mu.Lock()
					if state == 0 {
						state = 2
						stopWaiting()
					}
					mu.Unlock()
					return
				}
			}
		}()
		lead := c.Campaign(cctx, key, r.w.TTL, claim)
		close(decided)
		<-watched
		if lead == nil {
			stopWaiting()
			time.Sleep(retryBackoff)
			continue
		}
		r.elected.Add(1)
		select {
		case r.electedC <- struct{}{}:
		default:
		}
		r.lead(lead)
		stopWaiting()
		r.holds.Add(1)
		select {
		case r.progress <- struct{}{}:
		default:
		}
	}
}

// lead uses a leadership as hold uses a lease, then resigns by closing the
// stream, unless it was lost.
func (r *Run) lead(l *leadership) {
	h := l.Held
	for i := 0; i < r.w.Writes; {
		if h.Write(r.ctx, r.w.Step, nil) {
			i++
			continue
		}
		select {
		case <-h.Lost():
		default:
			if h.AwaitNews(r.ctx, time.Until(h.Expire())+2*h.TTL) {
				continue
			}
			r.History.Add(Event{Op: OpAbandon, Client: h.Client.ID, Key: h.Key, Lease: h.Lease, Write: true, Call: time.Now()})
			h.markLost()
		}
		break
	}
	select {
	case <-h.Lost():
		<-l.ended
	default:
		l.closeStream()
	}
}
