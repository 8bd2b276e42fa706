package redislock

import (
	"context"
	"errors"
	"time"
)

// What a try did without its caller hearing of it (a reply lost, a caller
// gone, a waiter that stops waiting) is undone here: its hold, its place in
// the queue, or both, by abandon.lua, retried until it lands.

// undone undoes what the failed try of this attempt may have done (its
// hold and its place), trying until the undo lands or wait passes.
func (a *attempt) undone(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	backoff := undoBackoff
	for {
		tctx, cancel := context.WithTimeout(ctx, min(undoTry, max(time.Until(deadline), time.Millisecond)))
		done, err := a.abandon(tctx, true)
		cancel()
		if err == nil && !done {
			err = errUndoPending
		}
		if err == nil || ctx.Err() != nil || !time.Now().Add(backoff).Before(deadline) {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, undoMaxBackoff)
	}
}

// unwait withdraws a queued waiter, so those it held back (the waiters
// behind it, readers) go in now rather than when its place would have
// expired. The first try is made at
// once; should it fail, the clean-up goes on in the background.
func (a *attempt) unwait() {
	if !a.queued {
		return
	}
	a.queued = false
	ctx, cancel := context.WithTimeout(context.Background(), unwaitTry)
	defer cancel()
	if _, err := a.abandon(ctx, false); err == nil {
		return
	}
	gone := *a // the ids as they are now: the attempt may go on under fresh ones
	a.c.cleanUp(func(ctx context.Context) error {
		_, err := gone.abandon(ctx, false)
		return err
	}, time.Now().Add(3*a.c.maxRecheck))
}

// undo takes back, in the background, what this attempt may have done
// without its caller hearing of it: its hold (when undoHold) and its place
// in the queue. It retries until the undo lands, or until the
// hold would have run out by itself (it was granted for the request's ttl
// after the attempt started).
func (a *attempt) undo(undoHold bool) {
	queued := a.queued
	a.queued = false
	if !undoHold && !queued {
		return
	}
	until := a.start.Add(a.req.TTL)
	if queued {
		if q := time.Now().Add(3 * a.c.maxRecheck); q.After(until) {
			until = q
		}
	}
	if undoHold && a.notAfter != 0 {
		// Until Redis's clock passes notAfter the try may still arrive.
		if u := time.Now().Add(a.c.replyTimeout + 3*a.c.maxRecheck); u.After(until) {
			until = u
		}
	}
	gone := *a // the ids as they are now: the attempt may go on under fresh ones
	a.c.cleanUp(func(ctx context.Context) error {
		done, err := gone.abandon(ctx, undoHold)
		if err == nil && !done {
			return errUndoPending
		}
		return err
	}, until)
}

// errUndoPending says an undo found nothing to undo while the try it
// undoes could still reach Redis: it is tried again.
var errUndoPending = errors.New("redislock: the try to undo may still reach Redis")

// abandon runs abandon.lua once for this attempt. It is done when it
// landed and, with undoHold, when it undid the attempt's hold or Redis's
// clock is past the attempt's notAfter, when no try of it can act any
// more (notafter.go); an undo that found nothing before then may have run
// ahead of a try still on its way.
func (a *attempt) abandon(ctx context.Context, undoHold bool) (done bool, err error) {
	hold := "0"
	if undoHold {
		hold = "1"
	}
	reply, err := abandonScript.Run(ctx, a.c.rdb, a.ks.scriptKeys(false),
		a.id, a.req.Mode.arg(), a.req.Owner, hold, a.ks.channel, a.c.publish, requestKey(a.req.RequestID)).Slice()
	if err != nil {
		return false, err
	}
	now := intAt(reply, 2)
	a.c.clock.saw(now, time.Now())
	return !undoHold || intAt(reply, 0) == 1 || a.notAfter == 0 || now > a.notAfter, nil
}

const (
	// unwaitTry bounds the try to leave the queue that a waiter
	// makes before answering its caller.
	unwaitTry = 250 * time.Millisecond
	// undoTry bounds one try of a clean-up.
	undoTry = 2 * time.Second
	// undoBackoff is the first pause between tries; it doubles up to
	// undoMaxBackoff.
	undoBackoff    = 50 * time.Millisecond
	undoMaxBackoff = 2 * time.Second
)

// cleanUp runs op in the background until it succeeds or until passes
// (after at least one try), backing off between tries.
func (c *Client) cleanUp(op func(context.Context) error, until time.Time) {
	c.undos.add()
	go func() {
		defer c.undos.done()
		backoff := undoBackoff
		for {
			ctx, cancel := context.WithTimeout(context.Background(), undoTry)
			err := op(ctx)
			cancel()
			if err == nil || !time.Now().Add(backoff).Before(until) {
				return
			}
			select {
			case <-time.After(backoff):
			case <-c.closing:
				return
			}
			backoff = min(2*backoff, undoMaxBackoff)
		}
	}()
}
