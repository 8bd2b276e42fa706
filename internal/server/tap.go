package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/connguard"
)

// gate decides, as a stream's headers arrive and before gRPC spends a
// goroutine or a buffer on it, whether lockd takes it: health calls up to
// a bound (they need no token), every other call only with a known bearer
// token when authentication is on, and only when its connection has, or
// can take, one of the listener's places.
type gate struct {
	authn     *auth.Authenticator
	health    atomic.Int64
	maxHealth int64
	refused   *summary
	conns     *connections
}

func newGate(authn *auth.Authenticator, maxHealth int, refused *summary, conns *connections) *gate {
	return &gate{authn: authn, maxHealth: int64(maxHealth), refused: refused, conns: conns}
}

// tap is the server's grpc.InTapHandle. It runs on the connection's reader
// and must not block.
func (g *gate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if auth.IsOpen(info.FullMethodName) {
		if n := g.health.Add(1); g.maxHealth > 0 && n > g.maxHealth {
			g.health.Add(-1)
			g.refused.add("health_limit")
			return nil, status.Errorf(codes.ResourceExhausted, "too many health calls open on this replica (limit %d); use /healthz and /readyz on the HTTP port, or retry", g.maxHealth)
		}
		// gRPC cancels the stream's context when the stream ends, however
		// it ends.
		context.AfterFunc(ctx, func() { g.health.Add(-1) })
		return ctx, nil
	}
	authed, err := g.authn.TapHandle(ctx, info)
	if err != nil {
		g.refused.add("unauthenticated")
		// A connection that has shown no valid token gives way first,
		// and goes soon.
		connguard.Refuse(ctx, refusedGrace)
		return nil, err
	}
	ctx = authed
	// The call is let in: its connection takes a place (see
	// connections), if it has none yet.
	if err := g.conns.admitCall(ctx); err != nil {
		return nil, err
	}
	return ctx, nil
}

// summary logs events of one kind (refused calls, failed handshakes): the
// first at once, then at most one line per interval with their counts by
// reason, so that a flood of them does not flood the log too.
type summary struct {
	log      *slog.Logger
	msg      string
	interval time.Duration
	counts   chan string
}

func newSummary(log *slog.Logger, msg string, interval time.Duration) *summary {
	return &summary{log: log, msg: msg, interval: interval, counts: make(chan string, 1024)}
}

// add counts one event for reason; it never blocks (past a backlog of 1024
// events, further ones go uncounted in the log; metrics count every one).
func (s *summary) add(reason string) {
	select {
	case s.counts <- reason:
	default:
	}
}

// run logs until ctx ends.
func (s *summary) run(ctx context.Context) {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	counts := map[string]int{}
	var logged time.Time
	flush := func() {
		if len(counts) == 0 {
			return
		}
		attrs := make([]any, 0, 2*len(counts)+2)
		for r, n := range counts {
			attrs = append(attrs, r, n)
		}
		if !logged.IsZero() {
			attrs = append(attrs, "since", time.Since(logged).Round(time.Second))
		}
		s.log.Warn(s.msg, attrs...)
		clear(counts)
		logged = time.Now()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.counts:
			counts[r]++
			if time.Since(logged) >= s.interval {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}
