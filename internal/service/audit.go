package service

import (
	"context"
	"log/slog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/redislock"
)

// audit writes who took, released and force-released which key: the
// client's name, the key, the owner as the client named it, the fencing
// token and hold count; never a lease id or a token. A zero audit writes
// nothing.
type audit struct{ log *slog.Logger }

// clientAttr names the caller; "" when authentication is off.
func clientAttr(ctx context.Context) slog.Attr {
	id, _ := auth.FromContext(ctx)
	return slog.String("client", id.Name)
}

func (a audit) took(ctx context.Context, l redislock.Lease) {
	if a.log == nil || !a.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "took", clientAttr(ctx),
		slog.String("key", l.Key), slog.String("owner", l.Owner), slog.String("mode", l.Mode.String()),
		slog.Uint64("fencing_token", l.FencingToken), slog.Uint64("hold_count", uint64(l.HoldCount)),
		slog.Duration("ttl", l.TTL))
}

// released records a Release (how "release") or the release of a lease
// whose KeepAlive stream closed ("release_on_close"), with the holds left.
func (a audit) released(ctx context.Context, key string, left uint32, how string) {
	if a.log == nil || !a.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "released", clientAttr(ctx),
		slog.String("key", key), slog.Uint64("hold_count", uint64(left)), slog.String("how", how))
}

// ForceReleased records that an administrator released every hold of
// owner on key; it logs at WARN, so it shows at any audit level but ERROR.
func (s *LockServer) ForceReleased(ctx context.Context, key, owner string, fencingToken uint64) {
	if s.audit.log == nil {
		return
	}
	s.audit.log.LogAttrs(ctx, slog.LevelWarn, "force-released", clientAttr(ctx),
		slog.String("key", key), slog.String("owner", owner), slog.Uint64("fencing_token", fencingToken))
}
