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
// ttl. It costs no Redis round trip. A lease enters the book when granted
// or renewed here (a lease granted through another replica enters at its
// first renewal here, even beyond the client's limit: a renewal is never
// refused, as that would lose a held lease, and the client gets no new
// lease here until it is back under its limit). It leaves the book when
// it is released through this replica, is lost under its KeepAlive here,
// or its ttl (as last granted or renewed here) has run out. So every held
// lease is in the book of the replica that last granted or renewed it,
// and may stay in others' until their ttl as last seen there ends. The
// count is per replica: a client that spreads its calls over several
// replicas holds up to its limit through each. Streams (Hold, Campaign)
// hold their leases only while they stay open, and are bounded as
// streams.

// sweepEvery is how often, at most, a client's expired entries are
// dropped as leases are added.
const sweepEvery = 5 * time.Second

// leaseBook is the leases granted or renewed through this replica, by
// client.
type leaseBook struct {
	clients sync.Map // client name -> *clientLeases
}

// clientLeases are one client's leases.
type clientLeases struct {
	mu       sync.Mutex
	reserved int // places taken by grants under way
	byID     map[string]*bookedLease
	byHolder map[holder]string // lease id
	swept    time.Time
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

// sweep drops the leases whose ttl has run out; c.mu is held.
func (c *clientLeases) sweep(now time.Time) {
	c.swept = now
	for id, l := range c.byID {
		if !now.Before(l.expires) {
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
	reentry := false
	if owner != "" {
		_, reentry = c.byHolder[holder{key: key, owner: owner, mode: mode}]
	}
	if !reentry && limit > 0 && c.count() >= limit {
		c.sweep(time.Now())
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
		c.bookLocked(res.Lease, now)
	}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bookLocked counts l, granted or renewed at now, until its ttl from now
// has run out; c.mu is held.
func (c *clientLeases) bookLocked(l redislock.Lease, now time.Time) {
	expires := now.Add(l.TTL)
	if booked, ok := c.byID[l.ID]; ok {
		booked.expires = later(booked.expires, expires)
		return
	}
	h := holder{key: l.Key, owner: l.Owner, mode: l.Mode}
	c.byID[l.ID] = &bookedLease{holder: h, expires: expires}
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
	c.bookLocked(l, time.Now())
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

// revoke takes out of the book the leases (not yet run out) of every
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
