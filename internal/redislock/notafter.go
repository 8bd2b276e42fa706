package redislock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lock script that reaches Redis after lockd gave up on it (Redis was
// frozen with the script in its socket, and lockd answered UNAVAILABLE at
// its read timeout) must do nothing. lockd undoes what such a call may
// have done, but the undo goes out on another connection and may run
// first: a grant made after it would stay, unheard, and a later Acquire by
// the same owner would re-enter it and answer two holds.
//
// So every acquire carries not_after_ms: Redis's clock by which lockd will
// have given up on the call. A script run later answers "late" and does
// nothing. A script run in time ran before lockd gave up, hence before
// any undo was sent, so the undo finds what it did. An undo that finds
// nothing is retried until Redis's clock is past not_after_ms.
//
// lockd knows Redis's clock from the replies: offset is Redis's clock
// minus this host's at the moment a reply arrived, which is never more
// than the true offset (the reply was made before it arrived), so
// not_after_ms errs early, never late.

// lateMargin is taken off not_after_ms for the clocks' steps.
const lateMargin = 20 * time.Millisecond

// redisClock is what lockd knows of Redis's clock.
type redisClock struct {
	known  atomic.Bool
	offset atomic.Int64 // ms, Redis's clock minus this host's, as last seen
}

// saw records Redis's clock (ms) read from a reply that arrived at recv.
func (k *redisClock) saw(redisMs int64, recv time.Time) {
	if redisMs <= 0 {
		return
	}
	k.offset.Store(redisMs - recv.UnixMilli())
	k.known.Store(true)
}

// notAfter returns Redis's clock (ms) past which a script sent at sent
// reaches nobody: lockd gives up on it at its read timeout or at ctx's
// deadline, whichever comes first. It returns 0 (no bound) while Redis's
// clock is unknown, or when neither bounds the wait.
func (c *Client) notAfter(ctx context.Context, sent time.Time) int64 {
	var giveUp time.Time
	if c.replyTimeout > 0 {
		giveUp = sent.Add(c.replyTimeout)
	}
	if d, ok := ctx.Deadline(); ok && (giveUp.IsZero() || d.Before(giveUp)) {
		giveUp = d
	}
	return c.notAfterAt(giveUp)
}

// notAfterAt returns Redis's clock (ms) at giveUp by this host's clock,
// less lateMargin; 0 (no bound) for a zero giveUp or while Redis's clock
// is unknown.
func (c *Client) notAfterAt(giveUp time.Time) int64 {
	if giveUp.IsZero() || !c.clock.known.Load() {
		return 0
	}
	return max(1, giveUp.Add(-lateMargin).UnixMilli()+c.clock.offset.Load())
}

// replyTimeout returns how long rdb waits for a reply before it gives up
// (its ReadTimeout), or 0 when it does not bound the wait or cannot tell.
func replyTimeout(rdb redis.UniversalClient) time.Duration {
	var rt time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	case *redis.Ring:
		rt = c.Options().ReadTimeout
	default:
		return 0
	}
	if rt == 0 {
		return 3 * time.Second // go-redis's default
	}
	return max(0, rt)
}
