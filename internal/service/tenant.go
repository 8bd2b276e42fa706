package service

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redislock"
)

// Owners and request ids belong to the client that sent them (SPEC §2):
// with authentication on, the owner and request_id lockd hands the engine
// are the client's name, a colon, and the caller's value. Client names
// hold no colon, so the first colon ends the name and no client's owner or
// request id can equal another's, however they are spelled ("billing"
// with owner "-ledger:w" is "billing:-ledger:w", never "billing-ledger:w").
// Owners lockd makes up for an empty owner ("lockd-" and random bits) hold
// no colon either, so no client can name one. The lease's owner shown back
// to its client is the client's own value again.

// ownerFor returns the engine's owner for the caller's owner.
func ownerFor(ctx context.Context, owner string) string {
	if owner == "" {
		return "" // the engine makes up a fresh, unique owner
	}
	return scoped(ctx, owner)
}

// requestIDFor returns the engine's request id for the caller's.
func requestIDFor(ctx context.Context, id string) string {
	if id == "" {
		return ""
	}
	return scoped(ctx, id)
}

// replayableRequestID returns the engine's request id for a grant, whose
// first result retries replay, scoped to its caller: the authenticated
// client and the owner. A call without authentication and without an owner
// has no caller to tell apart from another that happens to send the same
// request id, so its request id is not used: no such call is ever handed
// another's lease. It is then a call without a request id: a grant whose
// reply was lost is undone rather than kept for a retry.
func replayableRequestID(ctx context.Context, id, owner string) string {
	if _, ok := auth.FromContext(ctx); !ok && owner == "" {
		return ""
	}
	return requestIDFor(ctx, id)
}

func scoped(ctx context.Context, v string) string {
	id, ok := auth.FromContext(ctx)
	if !ok {
		return v
	}
	return id.Name + ":" + v
}

// shownOwner returns lease with its owner as displayed shows it.
func shownOwner(ctx context.Context, l redislock.Lease) redislock.Lease {
	l.Owner = displayed(ctx, l.Owner)
	return l
}

// displayed returns an owner as callers see it (a lease's, a busy key's
// holder, an election's leader): as its client named it. With
// authentication on, the client's name that lockd put before it is left
// out, whoever asks: a client sees other clients' owner names (where their
// prefixes meet), never their names, lease ids or request ids.
func displayed(ctx context.Context, owner string) string {
	if _, ok := auth.FromContext(ctx); !ok {
		return owner
	}
	if _, named, ok := strings.Cut(owner, ":"); ok {
		return named
	}
	return owner // made up by lockd for an empty owner
}

// clientCounts counts what one client holds on this replica.
type clientCounts struct {
	waiters, keepAlives, watches atomic.Int64
}

// perClient keeps each client's counts; a client's entry lives as long as
// the process (clients are few and named by the configuration).
type perClient struct{ m sync.Map }

func (p *perClient) of(name string) *clientCounts {
	if c, ok := p.m.Load(name); ok {
		return c.(*clientCounts)
	}
	c, _ := p.m.LoadOrStore(name, &clientCounts{})
	return c.(*clientCounts)
}

// fairShare is the most of a replica-wide pool of max a client without a
// limit of its own may take when two or more clients are configured: half
// of it, so that no one client can take a pool whole.
func fairShare(pool int) int {
	return max(1, pool/2)
}

// clientLimit is the bound of a client with identity id on a pool of max
// (0: none) whose own limit is own: its own when set, else its fair share
// when it has one (FairShare and a bounded pool), else none.
func clientLimit(id auth.Identity, own, pool int) (n int, fair bool) {
	switch {
	case own > 0:
		return own, false
	case id.FairShare && pool > 0:
		return fairShare(pool), true
	}
	return 0, false
}

// watchLimit is a client's own bound on WatchAccessToken streams: its
// watches limit, or, when it set none, its keepalives limit, which bounded
// them before watches had a limit of their own.
func watchLimit(l config.Limits) int {
	if l.Watches > 0 {
		return l.Watches
	}
	return l.KeepAlives
}

// take counts one more against a replica-wide counter (bounded by max,
// 0 meaning none) and the caller's own (bounded by its limit, or its fair
// share of max), or neither when either is full. what names the resource
// in the error.
func take(ctx context.Context, total *atomic.Int64, max int, own func(*clientCounts) *atomic.Int64, ownLimit func(config.Limits) int, clients *perClient, what string) (func(), error) {
	var mine *atomic.Int64
	if id, ok := auth.FromContext(ctx); ok {
		if n, fair := clientLimit(id, ownLimit(id.Limits), max); n > 0 {
			mine = own(clients.of(id.Name))
			if mine.Add(1) > int64(n) {
				mine.Add(-1)
				return nil, &limitError{what: what, n: n, client: id.Name, fair: fair}
			}
		}
	}
	if total.Add(1) > int64(max) && max > 0 {
		total.Add(-1)
		if mine != nil {
			mine.Add(-1)
		}
		return nil, &limitError{what: what, n: max}
	}
	return func() {
		total.Add(-1)
		if mine != nil {
			mine.Add(-1)
		}
	}, nil
}

// takeWaiter counts a call about to wait for a busy key.
func (s *LockServer) takeWaiter(ctx context.Context) (func(), error) {
	return take(ctx, &s.waiters, s.bounds.MaxWaiters,
		func(c *clientCounts) *atomic.Int64 { return &c.waiters },
		func(l config.Limits) int { return l.Waiters }, &s.clients, "waiters")
}

// takeKeepAlive counts an open KeepAlive stream.
func (s *LockServer) takeKeepAlive(ctx context.Context) (func(), error) {
	return take(ctx, &s.streams, s.bounds.MaxKeepAlives,
		func(c *clientCounts) *atomic.Int64 { return &c.keepAlives },
		func(l config.Limits) int { return l.KeepAlives }, &s.clients, "KeepAlive streams")
}
