package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// Acquire asks for a hold on req.Key in req.Mode, waiting up to req.Wait
// (bounded by ctx) when the key is busy. Not getting the lock in time is not
// an error: the Result says Acquired false with the holders' RetryAfter.
//
// When the outcome of a try cannot reach the caller (ctx ends, Redis stalls
// and the reply is lost), what the try did is undone exactly: the hold it
// added (a fresh lease, or one more hold of the owner's lease) and its place
// in the queue, retrying until the undo lands or the hold would
// have run out. A call with a RequestID keeps its grant instead, for the
// caller's retry to claim; a grant a release handed a waiter whose call
// had ended is given back all the same (handoff.go).
func (c *Client) Acquire(ctx context.Context, req Request) (Result, error) {
	if err := ValidateKey(req.Key); err != nil {
		return Result{}, err
	}
	if req.Mode != Read && req.Mode != Write && req.Mode != Permit {
		return Result{}, fmt.Errorf("%w: %d", ErrInvalidMode, req.Mode)
	}
	if req.Mode == Permit && req.Limit < 1 {
		return Result{}, fmt.Errorf("%w: limit must be at least 1, got %d", ErrInvalidLimit, req.Limit)
	}
	if req.TTL < time.Millisecond {
		return Result{}, fmt.Errorf("%w: ttl must be at least 1ms, got %v", ErrInvalidTTL, req.TTL)
	}
	if err := c.prepared(ctx); err != nil {
		return Result{}, err
	}
	ownerGiven := req.Owner != ""
	if !ownerGiven {
		req.Owner = "lockd-" + newID()
	}
	a := &attempt{c: c, ks: c.keys(req.Key), req: req, ownerGiven: ownerGiven, start: time.Now()}
	if err := a.freshIDs(); err != nil {
		return Result{}, err
	}

	if req.Wait <= 0 {
		res, err := a.tryInTime(ctx, 0, nil)
		return a.finish(ctx, res, err)
	}
	deadline := a.start.Add(req.Wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// Woken when this attempt reaches the head of the queue (or, for a
	// reader, when readers may go in), and at least every maxRecheck in
	// case a message was lost. On a channel this process listens to
	// already, the waiter joins before its first try, which then needs no
	// re-check.
	// A message telling it that it is next in line says for how long the
	// head keeps its place (watch): it then waits that long without
	// asking Redis.
	var watch atomic.Int64
	in := interest{id: a.id, reader: req.Mode == Read, watch: &watch}
	wake, done := c.subs.listening(ctx, a.ks.channel, in)
	defer func() {
		if done != nil {
			done()
		}
	}()
	res, err := a.waitingTry(ctx, time.Until(deadline), nil)
	if err != nil || res.Acquired {
		return a.finish(ctx, res, err)
	}
	if req.BeforeWait != nil {
		waited, err := req.BeforeWait()
		if err != nil {
			a.unwait()
			return Result{}, err
		}
		defer waited()
	}
	recheck := wake == nil || a.id != in.id
	if wake == nil {
		in.id = a.id
		var err error
		// A queued waiter waits for the subscription's confirmation no
		// longer than it may go without trying: at the head, its place
		// lasts only a moment (HEAD_MS) unless it tries again.
		confirmWait := c.maxRecheck
		if a.queued {
			confirmWait = min(confirmWait, headRefresh)
		}
		wake, done, err = c.subs.subscribe(ctx, a.ks.channel, in, deadline, confirmWait)
		if err != nil {
			a.unwait()
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = nil // the wait ended before the subscription was confirmed
			}
			return a.finish(ctx, res, err)
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if a.id != in.id {
			// A late grant was given back and the attempt goes on under
			// a fresh id: be woken by that one.
			in.id = a.id
			if w, d := c.subs.listening(ctx, a.ks.channel, in); d != nil {
				done()
				wake, done = w, d
			}
		}
		// Re-check after subscribing, and after every wake-up.
		if recheck {
			res, err = a.waitingTry(ctx, left, nil)
			if err != nil || res.Acquired {
				return a.finish(ctx, res, err)
			}
		}
		recheck = true
		next := min(time.Until(deadline), c.maxRecheck)
		switch res.place {
		case placeHead:
			// The head of the queue (or a reader) re-checks when the
			// holders' leases run out; a queued head also often enough
			// to keep its place, which lasts a moment only, so that a
			// head that died holds nobody up for long.
			next = min(next, res.RetryAfter)
			if a.queued {
				next = min(next, headRefresh)
			}
		case placeNext:
			// The one next in line re-checks when the head's place would
			// run out: a head that died is passed over then.
			next = min(next, res.headLeft+time.Millisecond)
		}
		// Those further behind are woken in turn, and re-check only as a
		// fallback. A writer at the head offers its next try to this
		// process's releases of the key (handoff.go).
		timer.Reset(next)
		o := a.offer(ctx, res, deadline)
		var offered <-chan handed
		if o != nil {
			offered = o.out
		}
		var got *handed
		ended := false
		select {
		case h := <-offered:
			got, o = a.heard(ctx, h), nil
			ended = got == nil
		case <-wake:
			switch ms := watch.Swap(0); {
			case ms > 0:
				res.place, res.headLeft = placeNext, time.Duration(ms)*time.Millisecond
				recheck = false
			case ms == headBusy && a.queued:
				// The head of the queue while the key is held: it keeps
				// its place by trying again within headRefresh, and is
				// woken when the key is released.
				res.place = placeHead
				recheck = false
			}
		case <-timer.C:
		case <-ctx.Done():
			ended = true
		}
		if o != nil && !a.c.offers.withdraw(o) {
			// A release took the offer meanwhile: it may have granted the
			// key. Its outcome is waited for as long as this call waits.
			got = a.handedWithin(ctx, o, deadline)
			if got == nil && ctx.Err() != nil {
				ended = true
			}
		}
		if got != nil {
			if got.raw == nil && got.err == nil {
				// Not handed the key: the release woke whoever may take
				// it, as it does without an offer; the wake-up may have
				// been taken already, so the waiter re-checks.
				recheck = true
			} else {
				a.notAfter = max(a.notAfter, got.notAfter)
				if got.err != nil && !transient(got.err) {
					// The release's own call ended (its caller went away):
					// for this attempt, a try whose outcome is unknown.
					got.err = fmt.Errorf("%w: %v", errHandoffLost, got.err)
				}
				r, err := a.waitingTry(ctx, time.Until(deadline), got)
				if r.Acquired || (err != nil && !ended) {
					return a.finish(ctx, r, err)
				}
				if !ended {
					res = r
				}
				recheck = false
			}
		}
		if ended {
			a.unwait()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's deadline ends the wait like wait_timeout.
				return a.finish(ctx, res, nil)
			}
			return a.finish(ctx, res, ctx.Err())
		}
	}
	a.unwait()
	return a.finish(ctx, res, nil)
}

// waitingTry is tryInTime for a call that waits (first, if given, is the
// outcome of a try a release made for it): a try that failed on
// Redis (a dropped connection, a restart, a failover) does not end the
// wait; the call tries again under fresh ids after a pause that grows to
// maxRecheck, for as long as its wait lasts. The failed try may have been
// granted unheard: without a RequestID it is undone first (the next try,
// by the same owner, would re-enter it and answer two holds); with one,
// the next try claims it.
func (a *attempt) waitingTry(ctx context.Context, wait time.Duration, first *handed) (Result, error) {
	res, err := a.tryInTime(ctx, wait, first)
	if err == nil || !transient(err) || ctx.Err() != nil {
		a.pause = 0
		return res, err
	}
	if a.req.RequestID == "" {
		if uerr := a.undone(ctx, wait); uerr != nil {
			return Result{}, err
		}
	}
	if err := a.freshIDs(); err != nil {
		return Result{}, err
	}
	a.pause = min(max(2*a.pause, retryPause), a.c.maxRecheck)
	return Result{RetryAfter: a.pause}, nil
}

// Where a queued call stands, as the busy answer tells it.
const (
	placeHead   = 0 // the head of the queue, or not queued
	placeBehind = 1 // behind others
	placeNext   = 2 // next in line after the head
)

// headRefresh is how often the head of the queue tries again to keep its
// place, which lasts 1.2s without a try (HEAD_MS in common.lua).
const headRefresh = 300 * time.Millisecond

// errHandoffLost is the outcome of a try a release made for a waiter
// (handoff.go) when the release's call ended before its reply came.
var errHandoffLost = errors.New("redislock: the release handing over the key ended before its reply")

// retryPause is the first pause of a waiting call after a try failed on
// Redis.
const retryPause = 50 * time.Millisecond

// transient reports whether err is Redis failing a try rather than the
// engine refusing the request.
func transient(err error) bool {
	for _, refusal := range []error{ErrUpgrade, ErrKeyInUse, ErrLimitMismatch, ErrInvalidKey, ErrInvalidTTL,
		ErrInvalidMode, ErrInvalidLimit, ErrInvalidLeaseID, ErrClosed, redis.ErrClosed, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, refusal) {
			return false
		}
	}
	return true
}

// attempt is one Acquire call. Its id tags the hold it may add and its
// place in the queue; its lease id names the lease if a new one is
// granted.
type attempt struct {
	c          *Client
	ks         keySet
	req        Request
	ownerGiven bool
	leaseID    string
	id         string
	start      time.Time
	queued     bool          // a try may have queued it (a writer or a permit waiter)
	replayed   bool          // the grant is a retried request_id's first result
	pause      time.Duration // the last pause after a try failed on Redis
	// notAfter is Redis's clock (ms) past which no try under this id can
	// act any more (see notafter.go), 0 when unknown; lateRetry is set
	// while a try answered "late" in time goes again.
	notAfter  int64
	lateRetry bool
}

// freshIDs gives the attempt a new attempt id and lease id.
func (a *attempt) freshIDs() error {
	a.id = newAttemptID()
	a.notAfter = 0
	a.leaseID = newID()
	if a.req.NewLeaseID != nil {
		a.leaseID = a.req.NewLeaseID()
		if err := validLeaseID(a.leaseID); err != nil {
			return err
		}
	}
	return nil
}

// validLeaseID checks an id made by Request.NewLeaseID: the lock record
// keeps a lone lease in a '|'-separated string (common.lua).
func validLeaseID(id string) error {
	if id == "" || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool { return r == '|' || unicode.IsControl(r) }) {
		return fmt.Errorf("%w: want 1 to 128 bytes without '|' or control characters, got %q", ErrInvalidLeaseID, id)
	}
	return nil
}

// tryInTime is try (first, if given, is the outcome of a try a release
// made for the attempt, read before any try of its own), but a grant whose
// reply came after its lease may have
// run out (a slow network, a long pause of this process, a request served
// by a Redis that was frozen meanwhile) is not handed out: the lease is
// known to run until sent + remaining by this host's clock and not a
// moment longer. The attempt goes on with fresh ids, answered as not
// acquired, with no wait before the next try.
//
// The late grant itself is undone only when nobody can claim it, that is
// without a RequestID; a retry that meanwhile re-enters the owner's lease
// adds a hold of its own, which that undo leaves alone. With a RequestID
// the grant is the request's first result, which every retry of the
// request replays, and this call's own next try is such a retry: it
// claims the grant (common.lua's replay). So it is kept, as is
// every grant of a request id whose reply went astray, and read again at
// once: a replay that comes in time is a lease that runs until its own
// sent + remaining. A grant nobody claims runs out with its ttl.
func (a *attempt) tryInTime(ctx context.Context, wait time.Duration, first *handed) (Result, error) {
	for tries := 1; ; tries++ {
		var res Result
		var err error
		if first != nil {
			res, err = a.answer(ctx, wait, first.sent, first.raw, first.err)
			first = nil
		} else {
			res, err = a.try(ctx, wait)
		}
		if err != nil || !res.Acquired || time.Now().Before(res.Lease.sent.Add(res.Lease.remaining)) {
			return res, err
		}
		claimable := a.req.RequestID != ""
		if !claimable {
			late := *a
			late.undo(true)
		}
		a.replayed = false
		if err := a.freshIDs(); err != nil {
			return Result{}, err
		}
		if !claimable || tries > 1 {
			return Result{}, nil
		}
	}
}

func (a *attempt) try(ctx context.Context, wait time.Duration) (Result, error) {
	waitMs := int64(0)
	if wait > 0 {
		// A queued waiter keeps its place only a few re-checks ahead;
		// each re-check extends it. A waiter whose process dies stops
		// blocking others soon, not when its whole wait would end.
		waitMs = max(1, min(wait, 3*a.c.maxRecheck).Milliseconds())
	}
	given := "0"
	if a.ownerGiven {
		given = "1"
	}
	if waitMs > 0 && a.req.Mode != Read {
		a.queued = true
	}
	request := requestKey(a.req.RequestID)
	sent := time.Now()
	notAfter := a.c.notAfter(ctx, sent)
	if notAfter != 0 {
		a.notAfter = max(a.notAfter, notAfter)
	}
	script, args := acquireScript, []any{a.req.Mode.arg() + given, a.req.Owner, a.leaseID, a.req.TTL.Milliseconds(), a.id, request,
		strconv.FormatInt(waitMs, 10) + "|" + strconv.FormatInt(a.c.lossGrace.Milliseconds(), 10) + "|" + a.c.publish, notAfter}
	if a.req.Mode == Permit {
		script, args = semaphoreAcquireScript, []any{a.req.Limit, a.req.Owner, a.leaseID, a.req.TTL.Milliseconds(), a.id, given,
			request, a.c.lossGrace.Milliseconds(), waitMs, a.ks.channel, a.c.publish, notAfter}
	}
	raw, err := a.c.runRaw(ctx, script, a.ks, a.ks.scriptKeys(true), args...)
	return a.answer(ctx, wait, sent, raw, err)
}

// answer reads the reply (raw, err) of a try sent at sent: this attempt's
// own, or the grant a release handed it (handoff.go).
func (a *attempt) answer(ctx context.Context, wait time.Duration, sent time.Time, raw any, err error) (Result, error) {
	if token, ok := raw.(string); ok && err == nil {
		// The fast path's answer: a fresh lease as asked, held once from
		// the token's instant.
		l, perr := a.freshLease(token)
		if perr != nil {
			return Result{}, perr
		}
		a.c.clock.saw(l.now, time.Now())
		a.queued = false
		a.replayed = false
		l.sent = sent
		return Result{Acquired: true, Lease: l}, nil
	}
	reply, _ := raw.([]any)
	if errors.Is(err, ErrNotReplicated) {
		if _, ok := raw.(string); ok {
			reply = []any{int64(1)}
		}
	}
	if errors.Is(err, ErrNotReplicated) && (status(reply) == 1 || status(reply) == 2) {
		// Granted on the master but not confirmed by its replicas: a
		// failover could lose it. Without a request id it is given back.
		// With one it is the request's first result, kept for its retry,
		// which is handed it only once the replicas confirm it: undoing
		// it could take it from under that retry.
		if a.req.RequestID == "" && status(reply) == 1 {
			a.undo(true)
		}
		return Result{}, err
	}
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		// The script may have run with its reply lost: undo what it may
		// have granted or queued, with or without a RequestID. A retry of
		// the request that got there first claimed the hold (common.lua's replay
		// tags it with the retry's attempt), and the undo leaves it; one
		// that comes after the undo is granted afresh.
		a.undo(true)
		return Result{}, err
	}
	a.c.notePause(a.ks, reply)
	a.c.clock.saw(intAt(reply, 1), time.Now())
	switch status(reply) {
	case -6:
		// Redis ran the script after the moment this process gives up
		// on it: it did nothing. Answered in time all the same, Redis's
		// clock stepped (or ran ahead of what the replies told): with the
		// clock it answered, noted above, the try goes again, once.
		if !a.lateRetry && time.Since(sent) < a.c.replyTimeout {
			a.lateRetry = true
			defer func() { a.lateRetry = false }()
			return a.try(ctx, wait)
		}
		return Result{}, fmt.Errorf("%w: key %q", ErrLate, a.req.Key)
	case 1, 2:
		l, err := parseLease(a.req.Key, reply)
		if err != nil {
			return Result{}, err
		}
		a.queued = false
		a.replayed = status(reply) == 2
		l.sent = sent
		return Result{Acquired: true, Lease: l, Available: int(intAt(reply, 10))}, nil
	case 0:
		return Result{RetryAfter: time.Duration(intAt(reply, 3)) * time.Millisecond, Holder: strAt(reply, 4), Available: int(intAt(reply, 5)),
			place: int(intAt(reply, 6)), headLeft: time.Duration(intAt(reply, 7)) * time.Millisecond}, nil
	case -4:
		if a.req.Mode == Permit {
			return Result{}, fmt.Errorf("%w: key %q is held as a lock", ErrKeyInUse, a.req.Key)
		}
		return Result{}, fmt.Errorf("%w: key %q is a semaphore with permits held", ErrKeyInUse, a.req.Key)
	case -5:
		return Result{}, fmt.Errorf("%w: key %q has permits held with limit %d, asked with %d", ErrLimitMismatch, a.req.Key, intAt(reply, 3), a.req.Limit)
	case -2:
		return Result{}, fmt.Errorf("%w: key %q", ErrUpgrade, a.req.Key)
	}
	return Result{}, fmt.Errorf("redislock: unexpected acquire reply %v", reply)
}

// freshLease is the lease the fast path granted: the one asked for, held
// once from Redis's clock at the grant, which is its fencing token (in
// microseconds).
func (a *attempt) freshLease(reply string) (Lease, error) {
	n, err := strconv.ParseUint(reply, 10, 64)
	if err != nil {
		return Lease{}, fmt.Errorf("redislock: unexpected acquire reply %q", reply)
	}
	now := int64(n / 1000)
	return Lease{
		Key:          a.req.Key,
		ID:           a.leaseID,
		Owner:        a.req.Owner,
		Mode:         a.req.Mode,
		FencingToken: n,
		TTL:          a.req.TTL.Truncate(time.Millisecond),
		ExpireTime:   time.UnixMilli(now + a.req.TTL.Milliseconds()),
		HoldCount:    1,
		remaining:    a.req.TTL.Truncate(time.Millisecond),
		now:          now,
	}, nil
}

// finish reports the outcome, and undoes a hold granted to a caller that
// has gone away meanwhile, so it leaves nothing behind.
func (a *attempt) finish(ctx context.Context, res Result, err error) (Result, error) {
	waited := time.Since(a.start)
	if err == nil && res.Acquired && ctx.Err() != nil {
		// Only a hold this call added is undone, and only when no retry
		// with the same request id could claim it.
		if !a.replayed && a.req.RequestID == "" {
			a.undo(true)
		}
		return Result{}, ctx.Err()
	}
	if err != nil {
		// A refusal after queueing (the key became a semaphore, or took
		// another limit) must not leave the place to hold others up.
		a.unwait()
		return Result{}, err
	}
	if res.Acquired {
		if res.Lease.ID == a.leaseID && !a.replayed {
			a.c.obs.Granted(a.req.Mode, waited)
		}
	} else if a.req.Wait > 0 {
		a.c.obs.Waited(a.req.Mode, waited)
	}
	return res, nil
}

// attemptIDLen is the length of an attempt id.
const attemptIDLen = 11

// newAttemptID returns 64 random bits, URL-safe: enough to keep the
// attempts of one lease apart, and short, as a lease remembers several.
func newAttemptID() string {
	return newID()[:attemptIDLen]
}
