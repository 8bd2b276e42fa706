package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// renewRetry bounds the pause before a failed renewal is tried again.
const renewRetry = time.Second

// Keeper is one KeepAlive of a lease: a stream that renews it, and may
// release it when the stream closes. Each Keeper registers in the lease as
// its newest keeper with its first renewal, so that when a client resumes
// KeepAlive elsewhere (another replica), only the newest Keeper's Release
// ends the lease and a stale one that ends late does not.
type Keeper struct {
	c       *Client
	key     string
	leaseID string
	id      string
	// expiry is when the lease runs out as last confirmed, by the local
	// clock (erring early); zero before the first renewal.
	expiry time.Time
	// end, once closed, ends KeepAlive with endCause (see EndOn).
	end      <-chan struct{}
	endCause error
}

// NewKeeper returns a Keeper for the lease leaseID of key.
func (c *Client) NewKeeper(key, leaseID string) *Keeper {
	return &Keeper{c: c, key: key, leaseID: leaseID, id: newAttemptID()}
}

// EndOn makes KeepAlive end with cause once end is closed, as it ends when
// its ctx does, but without a context of its own: the thousands of
// KeepAlives of a server share one channel that ends them all when it
// shuts down. It must be called before KeepAlive.
func (k *Keeper) EndOn(end <-chan struct{}, cause error) {
	k.end, k.endCause = end, cause
}

// KeepAlive renews the lease about every ttl/3 (ttl zero keeps the lease's
// own span) and calls renewed after each renewal, until ctx ends or the lease
// is lost. It returns an error wrapping ErrNotHeld when the lease is gone, or
// when renewals kept failing until the lease was about to run out: the
// holder learns of the loss before anyone else can be granted the lock.
// Renewals of all leases a Client keeps alive share pipelines.
func (c *Client) KeepAlive(ctx context.Context, key, leaseID string, ttl time.Duration, renewed func(Lease) error) error {
	return c.NewKeeper(key, leaseID).KeepAlive(ctx, ttl, renewed)
}

// KeepAlive renews the Keeper's lease as Client.KeepAlive does. renewed
// runs on the renewing goroutine: it should hand the lease on and return,
// as a renewal waits for it.
func (k *Keeper) KeepAlive(ctx context.Context, ttl time.Duration, renewed func(Lease) error) error {
	c := k.c
	if err := ValidateKey(k.key); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("%w: ttl must not be negative, got %v", ErrInvalidTTL, ttl)
	}
	if err := c.prepared(ctx); err != nil {
		return err
	}
	ks := c.keys(k.key)
	var (
		span       time.Duration
		registered bool // the lease names this Keeper its newest
	)
	// lost reports a lost lease: counted only if it was held, that is,
	// renewed at least once here.
	lost := func(err error) error {
		if registered {
			c.obs.Lost()
		}
		return err
	}
	// The lease's revocation (an administrator's ForceRelease) is told on
	// the lock's channel: the renewal waiting when the notice comes is
	// made due at once, finds the lease not held, and the KeepAlive ends
	// with ErrNotHeld before the key can go to anyone else. The notice is
	// listened for without waiting for Redis to confirm the subscription:
	// one missed costs only time, as the next scheduled renewal does the
	// same.
	revoked, unlisten, err := c.subs.listen(ctx, ks.channel, interest{id: revokedPrefix + k.leaseID})
	if err == nil {
		defer unlisten()
	}
	due := time.Now()
	var rn *renewal
	for {
		// Once a renewal has been confirmed, waiting for the next one ends
		// a little before the lease would run out.
		var until time.Time
		if !k.expiry.IsZero() {
			until = k.expiry.Add(-span / 6)
		}
		// A renewal is renewed again once answered; one given up may still
		// be in a batch, which answers it later.
		if rn == nil || !rn.answered {
			rn = &renewal{key: k.key, id: k.leaseID, ks: ks, ttl: ttl, keeper: k.id}
		}
		rn.register, rn.due, rn.early, rn.until = !registered, due, span/10, until
		res := c.renewer.renew(ctx, rn, revoked, k.end)
		switch err := res.err; {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errEnded):
			return k.endCause
		case errors.Is(err, ErrNotHeld):
			return lost(err)
		case err != nil && k.expiry.IsZero():
			return err
		case err != nil:
			giveUp := k.expiry.Add(-span / 6)
			if !time.Now().Before(giveUp) {
				return lost(fmt.Errorf("%w: key %q: renewals failed until the lease ran out: %v", ErrNotHeld, k.key, err))
			}
			due = time.Now().Add(min(span/10, renewRetry, time.Until(giveUp)))
			continue
		}
		registered = true
		k.expiry, span = res.sent.Add(res.lease.remaining), res.lease.TTL
		if err := renewed(res.lease); err != nil {
			return err
		}
		due = res.sent.Add(span / 3)
		if rn.notified {
			// The notice may have come while this renewal was on its way.
			due = time.Now()
		}
	}
}

// Release ends the whole lease, every hold of it, if this Keeper is still
// its newest: a KeepAlive started since (on this replica or another) keeps
// it, and then Release reports false. It retries until the release lands,
// ctx ends, or the lease has run out as last renewed here. A lease that is
// no longer held gives ErrNotHeld.
func (k *Keeper) Release(ctx context.Context) (bool, error) {
	if err := ValidateKey(k.key); err != nil {
		return false, err
	}
	ks := k.c.keys(k.key)
	return k.retry(ctx, func(ctx context.Context) error {
		_, err := k.c.release(ctx, ks, k.key, k.leaseID, "", k.id)
		return err
	})
}

// retry runs release, an end of the whole lease as its newest keeper, until
// it lands, ctx ends, or the lease has run out as last renewed here.
func (k *Keeper) retry(ctx context.Context, release func(context.Context) error) (bool, error) {
	backoff := undoBackoff
	for {
		tctx, cancel := context.WithTimeout(ctx, undoTry)
		err := release(tctx)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, errNotKeeper):
			return false, nil
		case errors.Is(err, ErrNotHeld):
			return false, err
		case ctx.Err() != nil:
			return false, ctx.Err()
		case k.expiry.IsZero() || !time.Now().Add(backoff).Before(k.expiry):
			return false, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false, ctx.Err()
		}
		backoff = min(2*backoff, undoMaxBackoff)
	}
}
