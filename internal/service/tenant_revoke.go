package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/lockd/lockd/internal/redislock"
)

// revokeTimeout bounds each release of a revoked client's lease.
const revokeTimeout = 5 * time.Second

// Revoke releases at once the leases granted through this replica by
// unary calls or renewed through it (see leaseBook) whose client may no longer lock their key,
// by mayLock: after a reload, the clients it removed lose their leases,
// and a client whose prefixes it narrowed those outside them, so that
// nobody waits for them until their ttl. Every stream keeping one alive
// ends NOT_FOUND (as after an administrator's ForceRelease); each release
// is audited. It returns how many leases it released.
func (s *LockServer) Revoke(ctx context.Context, mayLock func(client, key string) bool) int {
	released := 0
	for client, holders := range s.leases.revoke(mayLock) {
		for _, h := range holders {
			rctx, cancel := context.WithTimeout(ctx, revokeTimeout)
			ended, err := s.engine.ForceRelease(rctx, h.key, h.owner)
			cancel()
			switch {
			case errors.Is(err, redislock.ErrNotHeld):
				continue // released or run out meanwhile
			case err != nil:
				s.log.WarnContext(ctx, "could not release a lease of a revoked client; it runs out at its ttl", "client", client, "key", h.key, "err", err)
				continue
			}
			released += len(ended)
			for _, l := range ended {
				s.audit.revoked(ctx, client, h.key, displayedOf(l.Owner), l.FencingToken)
			}
		}
	}
	return released
}

// displayedOf is an engine owner as its client named it (see displayed).
func displayedOf(owner string) string {
	if _, named, ok := strings.Cut(owner, ":"); ok {
		return named
	}
	return owner
}

// revoked records the release of a lease whose client lost the right to
// hold it in a reload; it logs at WARN, as force-releases do.
func (a audit) revoked(ctx context.Context, client, key, owner string, fencingToken uint64) {
	if a.log == nil {
		return
	}
	a.log.LogAttrs(ctx, slog.LevelWarn, "released", slog.String("client", client), slog.String("key", key),
		slog.String("owner", owner), slog.Uint64("fencing_token", fencingToken), slog.String("how", "revoked"))
}
