package redislock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A handoff is the common case of a busy key: a holder releases it and the
// writer at the head of the queue is woken to take it. Woken, that writer
// runs acquire.lua, a second script and a second round trip after the
// release's, with a pub/sub message between them. When the head waits in
// the very lockd that sends the release, neither is needed: the waiter
// offers its acquire to this process while it waits at the head (offer),
// and a release of the key in this process takes the offer and hands the
// waiter the key in the release's own script (release.lua's hand_over),
// which grants exactly what the waiter's acquire.lua would have granted,
// or nothing (the waiter is then woken as usual). The waiter gets the
// script's outcome, a grant, nothing, or an error, and goes on with it as
// with the outcome of a try of its own.
//
// Only a waiter whose goroutine is parked in this process can be handed the
// key; one that died never is, so a dead waiter holds nobody up beyond its
// place in the queue, as before.

// Where an offer stands: open until a release takes it or its waiter
// withdraws it. A taken offer is settled exactly once: answered (the
// release passes its outcome on to the waiter, who goes on with it) or
// abandoned (the waiter stopped waiting for it first, or its call had
// ended by the time the release came back: whoever abandons it knows the
// waiter will not take a grant, and the release gives back what it
// granted, before it answers its own caller when it can: giveBack).
const (
	offerOpen int32 = iota
	offerTaken
	offerWithdrawn
	offerAnswered
	offerAbandoned
)

// offer is a waiting writer's acquire, offered to the releases of its key
// in this process.
type offer struct {
	record string
	// head and tail are release.lua's ARGV[5] but for its not_after_ms,
	// which the release works out when it sends the script.
	head, tail string
	deadline   time.Time       // the waiter stops waiting then
	ended      <-chan struct{} // closed when the waiter's call ends
	// waiter is the attempt as it offered itself, with the ids the
	// release grants under: the release gives that grant back itself
	// when the waiter is gone (giveBack).
	waiter attempt
	state  atomic.Int32
	out    chan handed
}

// handed is what a release that took an offer tells its waiter: its
// script's grant for the waiter (nil for none) or the error that left its
// outcome unknown, when it was sent, and the not_after_ms it carried.
type handed struct {
	sent     time.Time
	raw      any
	err      error
	notAfter int64
}

// offers holds, per lock record, the offer of the writer in this process
// that waits at the head of that lock's queue.
type offers struct {
	mu sync.Mutex
	m  map[string]*offer
	// n is len(m), read without the lock: most releases find no offer.
	n atomic.Int32
}

// put offers o for its record, in place of an older offer.
func (s *offers) put(o *offer) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*offer)
	}
	s.m[o.record] = o
	s.n.Store(int32(len(s.m)))
	s.mu.Unlock()
}

// take takes the open offer for record, or returns nil. An offer whose
// waiter's call has ended is left for the waiter to withdraw: nobody
// would take the key it would be handed.
func (s *offers) take(record string) *offer {
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.m[record]
	if o == nil || isClosed(o.ended) {
		return nil
	}
	delete(s.m, record)
	s.n.Store(int32(len(s.m)))
	if !o.state.CompareAndSwap(offerOpen, offerTaken) {
		return nil
	}
	return o
}

// withdraw takes o back, and tells whether it could: a release that took
// it first answers its outcome on o.out.
func (s *offers) withdraw(o *offer) bool {
	if !o.state.CompareAndSwap(offerOpen, offerWithdrawn) {
		return false
	}
	s.mu.Lock()
	if s.m[o.record] == o {
		delete(s.m, o.record)
		s.n.Store(int32(len(s.m)))
	}
	s.mu.Unlock()
	return true
}

// isClosed reports whether ch is closed (a nil ch never is).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// handedWithin waits for the outcome of the release that took a's offer o,
// until ctx ends or the wait is over (deadline), and returns it, or nil
// when the call stops waiting first: the offer is then abandoned, and the
// release gives back whatever it grants. An outcome that came meanwhile is
// still the call's when it waits no longer but is there to hear it; one
// that comes for a call that ended is given back here.
func (a *attempt) handedWithin(ctx context.Context, o *offer, deadline time.Time) *handed {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case h := <-o.out:
		return a.heard(ctx, h)
	case <-ctx.Done():
	case <-timer.C:
	}
	if o.state.CompareAndSwap(offerTaken, offerAbandoned) || o.state.Load() == offerAbandoned {
		return nil
	}
	return a.heard(ctx, <-o.out)
}

// heard returns the outcome h of a release that handed a's offer over, or
// gives back what it granted when a's call has ended (a caller that went
// away is never left holding a key it was handed) and returns nil.
func (a *attempt) heard(ctx context.Context, h handed) *handed {
	if ctx.Err() == nil {
		return &h
	}
	a.giveBack(context.Background(), h) // on a copy: a goes on as it is
	return nil
}

// giveBack takes back what the release whose outcome is h did for waiter
// w, whose call went away or stopped waiting before it could hear of it:
// the grant, or whatever it may have done when its outcome is unknown.
// When the outcome is known, one undo that lands is final, and it is made
// before giveBack returns, so that a release that gives back is answered
// once the key is free again; it is bounded by ctx's deadline (the
// releaser's call) and by unwaitTry. What is not undone by then (Redis
// slow or failing, or an outcome not known) is undone in the background.
// A caller that went away is never left holding a key a release handed
// it, with a request id either: a retry of the request that claimed the
// grant first took the hold over (common.lua's replay tags it with the
// retry's attempt), and the undo leaves it.
func (w attempt) giveBack(ctx context.Context, h handed) {
	if h.raw == nil && h.err == nil {
		return
	}
	w.notAfter = max(w.notAfter, h.notAfter)
	if h.err == nil {
		bound := time.Now().Add(unwaitTry)
		if d, ok := ctx.Deadline(); ok && d.Before(bound) {
			bound = d
		}
		actx, cancel := context.WithDeadline(context.Background(), bound)
		_, err := w.abandon(actx, true)
		cancel()
		if err == nil {
			return
		}
	}
	w.undo(true)
}

// offer offers a's next try to the releases of its key in this process,
// if a is a writer waiting at the head of the queue (res), until deadline;
// ctx is the waiter's call. It returns nil when there is nothing to offer:
// a reader, a permit, a waiter not at the head, or an engine that waits
// for replicas (a grant handed over would skip that wait).
func (a *attempt) offer(ctx context.Context, res Result, deadline time.Time) *offer {
	if a.req.Mode != Write || !a.queued || res.place != placeHead || a.c.waitReplicas > 0 {
		return nil
	}
	given, marker := "0", "0"
	if a.ownerGiven {
		given = "1"
	}
	if a.ks.marker != "" {
		marker = "1"
	}
	o := &offer{
		record:   a.ks.record,
		head:     a.id + "|" + given + "|" + strconv.FormatInt(a.req.TTL.Milliseconds(), 10) + "|",
		tail:     "|" + strconv.FormatInt(a.c.lossGrace.Milliseconds(), 10) + "|" + a.leaseID + "|" + requestKey(a.req.RequestID) + "|" + marker + "|" + a.req.Owner,
		deadline: deadline,
		ended:    ctx.Done(),
		waiter:   *a,
		out:      make(chan handed, 1),
	}
	a.c.offers.put(o)
	return o
}

// handoff is an offer a release took: it is answered with the release's
// outcome.
type handoff struct {
	o        *offer
	sent     time.Time
	notAfter int64
}

// handOver adds to a release's keys and arguments the offer for its key, if
// a writer in this process waits at the head of its queue, and returns the
// offer taken (nil for none), to be answered once the release is done.
func (c *Client) handOver(ctx context.Context, ks keySet, keys []string, args []any) (*handoff, []string, []any) {
	if ctx.Err() != nil {
		return nil, keys, args
	}
	o := c.offers.take(ks.record)
	if o == nil {
		return nil, keys, args
	}
	ho := &handoff{o: o, sent: time.Now()}
	giveUp := o.deadline
	if d, ok := ctx.Deadline(); ok && d.Before(giveUp) {
		giveUp = d
	}
	if c.replyTimeout > 0 && ho.sent.Add(c.replyTimeout).Before(giveUp) {
		giveUp = ho.sent.Add(c.replyTimeout)
	}
	ho.notAfter = c.notAfterAt(giveUp)
	if ks.marker != "" {
		keys = append(keys, ks.marker)
	}
	return ho, keys, append(args, o.head+strconv.FormatInt(ho.notAfter, 10)+o.tail)
}

// answer settles the offer with the outcome of the release: reply is
// release.lua's, whose fifth element is the grant, if any. The waiter
// hears it, unless its call has ended or it stopped waiting: then what the
// release granted it is given back before the release answers (ctx is the
// release's call), as far as giveBack can.
func (ho *handoff) answer(ctx context.Context, reply []any, err error) {
	h := handed{sent: ho.sent, err: err, notAfter: ho.notAfter}
	if err == nil && len(reply) > 4 {
		h.raw = reply[4]
	}
	o := ho.o
	if !isClosed(o.ended) && o.state.CompareAndSwap(offerTaken, offerAnswered) {
		o.out <- h
		return
	}
	o.state.Store(offerAbandoned)
	o.waiter.giveBack(ctx, h)
}
