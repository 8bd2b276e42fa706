package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/redislock"
)

// With authentication on, each replica keeps a book of the leases held
// through it by unary calls (Acquire, RLock, WLock, a semaphore's Acquire)
// and renewed through it (Renew, KeepAlive), by client, in memory: it
// bounds how many leases a client holds at once through the replica
// (limits.leases, or the fair share), and it is how a reload that removes
// a client releases that client's leases at once rather than at their
// ttl. A lease enters the book when granted or renewed here (a lease
// granted through another replica enters at its first renewal here, even
// beyond the client's limit: a renewal is never refused, as that would
// lose a held lease, and the client gets no new lease here until it is
// back under its limit). It leaves the book when it is released through
// this replica, is lost under its KeepAlive here, or its ttl (as last
// granted or renewed here) has run out — but a lease granted here to a
// client with a limit stays until Redis says it is gone: at the limit,
// the book asks Redis (recheck), its only round trip. So the count errs
// high, never low: a client holds at most its limit of leases granted
// through each replica, wherever it renews or releases them. The count
// is per replica: a client that spreads its calls over several replicas
// holds up to its limit through each. Streams (Hold, Campaign) hold
// their leases only while they stay open, and are bounded as streams.

// sweepEvery is how often, at most, a client's expired entries are
// dropped as leases are added.
const sweepEvery = 5 * time.Second

// leaseBook is the leases granted or renewed through this replica, by
// client.
type leaseBook struct {
	clients sync.Map // client name -> *clientLeases
	// describe tells who holds a key (the engine's Describe); nil: the
	// book never asks.
	describe func(context.Context, string) (redislock.LockInfo, error)
}

// clientLeases are one client's leases.
type clientLeases struct {
	mu       sync.Mutex
	reserved int // places taken by grants under way
	byID     map[string]*bookedLease
	byHolder map[holder]string // lease id
	swept    time.Time
	// limited is set when the client had a limit at its last grant here:
	// the leases taken here then stay past their ttl until Redis says
	// they are gone.
	limited bool
}

// holder is what makes a grant a re-entry of a lease: the same owner
// taking the same key in the same mode.
type holder struct {
	key, owner string
	mode       redislock.Mode
}

type bookedLease struct {
	holder
	expires time.Time // by the local clock, erring late
	taken   bool      // granted through this replica
}

func (b *leaseBook) of(name string) *clientLeases {
	if c, ok := b.clients.Load(name); ok {
		return c.(*clientLeases)
	}
	c, _ := b.clients.LoadOrStore(name, &clientLeases{byID: map[string]*bookedLease{}, byHolder: map[holder]string{}})
	return c.(*clientLeases)
}

// count is how many leases the client holds in the book, with the
// places taken by grants under way.
func (c *clientLeases) count() int { return len(c.byID) + c.reserved }

// sweep drops the leases whose ttl has run out, but for those taken here
// by a client with a limit (see recheck); c.mu is held.
func (c *clientLeases) sweep(now time.Time) {
	c.swept = now
	for id, l := range c.byID {
		if !now.Before(l.expires) && !(l.taken && c.limited) {
			c.dropLocked(id, l)
		}
	}
}

func (c *clientLeases) dropLocked(id string, l *bookedLease) {
	delete(c.byID, id)
	if c.byHolder[l.holder] == id {
		delete(c.byHolder, l.holder)
	}
}

// errLeaseLimit is wrapped by the limitError of a client at its leases
// limit.
var errLeaseLimit = errors.New("leases")

// reserve takes a place for a grant of key in mode to owner (the engine's
// owner) by the caller of ctx, within its limit (limit, or fair when it
// has none of its own and a fair share); a re-entry of a lease it holds
// takes none. The returned function must be called with the grant's
// result, or with an error. Without authentication it does nothing.
func (b *leaseBook) reserve(ctx context.Context, key, owner string, mode redislock.Mode, fair int) (func(redislock.Result, error), error) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return func(redislock.Result, error) {}, nil
	}
	limit, isFair := id.Limits.Leases, false
	if limit == 0 && id.FairShare && fair > 0 {
		limit, isFair = fair, true
	}
	c := b.of(id.Name)
	c.mu.Lock()
	c.limited = limit > 0
	reentry := false
	if owner != "" {
		_, reentry = c.byHolder[holder{key: key, owner: owner, mode: mode}]
	}
	if !reentry && limit > 0 && c.count() >= limit {
		c.sweep(time.Now())
		if c.count() >= limit {
			if err := b.recheck(ctx, c); err != nil {
				c.mu.Unlock()
				return nil, err
			}
		}
		if c.count() >= limit {
			c.mu.Unlock()
			return nil, &limitError{what: "leases held", n: limit, client: id.Name, fair: isFair}
		}
	}
	if !reentry {
		c.reserved++
	}
	c.mu.Unlock()
	return func(res redislock.Result, err error) {
		now := time.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		if !reentry {
			c.reserved--
		}
		if err != nil || !res.Acquired {
			return
		}
		c.bookLocked(res.Lease, now, true)
	}, nil
}

// maxRechecks bounds the leases one grant asks Redis about (see recheck).
const maxRechecks = 16

// recheck asks Redis, for the leases taken here whose ttl as seen here has
// run out, whether they are still held (renewed through another replica),
// until it finds one gone, for at most maxRechecks of them: it drops those
// gone, and asks again about the others at their expiry by Redis or in
// sweepEvery, whichever comes first. c.mu is held, and released while
// Redis answers.
func (b *leaseBook) recheck(ctx context.Context, c *clientLeases) error {
	if b.describe == nil {
		return nil
	}
	type stale struct {
		id string
		l  *bookedLease
	}
	var list []stale
	now := time.Now()
	for id, l := range c.byID {
		if l.taken && !now.Before(l.expires) {
			list = append(list, stale{id, l})
			if len(list) == maxRechecks {
				break
			}
		}
	}
	if len(list) == 0 {
		return nil
	}
	c.mu.Unlock()
	defer c.mu.Lock()
	for _, s := range list {
		info, err := b.describe(ctx, s.l.key)
		if err != nil {
			return err
		}
		left, held := heldBy(info, s.l.holder)
		c.mu.Lock()
		if c.byID[s.id] == s.l {
			if held {
				s.l.expires = later(s.l.expires, time.Now().Add(min(left, sweepEvery)))
			} else {
				c.dropLocked(s.id, s.l)
			}
		}
		c.mu.Unlock()
		if !held {
			return nil
		}
	}
	return nil
}

// heldBy tells whether h still holds the key info describes, and for how
// long; when info lists only some of the holders and not h, it may, and
// is taken to for sweepEvery.
func heldBy(info redislock.LockInfo, h holder) (time.Duration, bool) {
	for _, x := range info.Holders {
		if x.Owner == h.owner && x.Mode == h.mode {
			return x.Left, true
		}
	}
	if info.Held > len(info.Holders) {
		return sweepEvery, true
	}
	return 0, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bookLocked counts l, granted through this replica (taken) or renewed
// at now, until its ttl from now has run out; c.mu is held.
func (c *clientLeases) bookLocked(l redislock.Lease, now time.Time, taken bool) {
	expires := now.Add(l.TTL)
	if booked, ok := c.byID[l.ID]; ok {
		booked.expires = later(booked.expires, expires)
		booked.taken = booked.taken || taken
		return
	}
	h := holder{key: l.Key, owner: l.Owner, mode: l.Mode}
	if old, ok := c.byHolder[h]; ok && c.byID[old] != nil {
		// An owner holds a key in a mode by one lease at a time: the
		// lease booked before is gone.
		c.dropLocked(old, c.byID[old])
	}
	c.byID[l.ID] = &bookedLease{holder: h, expires: expires, taken: taken}
	c.byHolder[h] = l.ID
	if now.Sub(c.swept) >= sweepEvery {
		c.sweep(now)
	}
}

// renewed counts l, just renewed by the caller of ctx, until its ttl from
// now has run out: a lease granted through another replica is booked
// here from its first renewal, even beyond the client's limit (a
// renewal is never refused, as that would lose a held lease; the client
// then gets no new lease here until it is back under its limit).
func (b *leaseBook) renewed(ctx context.Context, l redislock.Lease) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return
	}
	c := b.of(id.Name)
	c.mu.Lock()
	c.bookLocked(l, time.Now(), false)
	c.mu.Unlock()
}

// ended drops a lease that is no longer held.
func (b *leaseBook) ended(ctx context.Context, leaseID string) {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return
	}
	c := b.of(id.Name)
	c.mu.Lock()
	if l, ok := c.byID[leaseID]; ok {
		c.dropLocked(leaseID, l)
	}
	c.mu.Unlock()
}

// forced drops the leases of owner (the engine's) on key, in every mode,
// whichever client holds them: an administrator ended them.
func (b *leaseBook) forced(key, owner string) {
	b.clients.Range(func(_, v any) bool {
		c := v.(*clientLeases)
		c.mu.Lock()
		for _, mode := range []redislock.Mode{redislock.Read, redislock.Write, redislock.Permit} {
			h := holder{key: key, owner: owner, mode: mode}
			if id, ok := c.byHolder[h]; ok {
				c.dropLocked(id, c.byID[id])
			}
		}
		c.mu.Unlock()
		return true
	})
}

// revoke takes out of the book the leases it still counts of every
// client that may no longer lock their keys, by mayLock, and returns
// them by client.
func (b *leaseBook) revoke(mayLock func(client, key string) bool) map[string][]holder {
	now := time.Now()
	out := map[string][]holder{}
	b.clients.Range(func(k, v any) bool {
		name, c := k.(string), v.(*clientLeases)
		c.mu.Lock()
		c.sweep(now)
		for id, l := range c.byID {
			if !mayLock(name, l.key) {
				out[name] = append(out[name], l.holder)
				c.dropLocked(id, l)
			}
		}
		c.mu.Unlock()
		return true
	})
	return out
}
