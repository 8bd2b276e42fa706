package server

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/lockd/lockd/internal/connguard"
)

// Transport bounds what connections and streams may cost lockd, so that
// no caller, with or without a token, can exhaust a replica's memory or
// goroutines. A zero Transport in Config means DefaultTransport.
type Transport struct {
	// MaxConnections bounds the admitted connections open at once on each
	// listener (gRPC, the gateway, the HTTP port): those on which a call
	// was let in (with authentication on, one with a known client's
	// token). A call that would admit one more is refused. With two or
	// more clients configured, one without limits.connections has at
	// most half of them. 0 means no bound.
	MaxConnections int
	// MaxPendingConnections bounds, on each listener, the connections not
	// admitted yet (see package connguard): when all are taken, the
	// source address holding the most loses its oldest. 0 means no bound.
	MaxPendingConnections int
	// PendingTimeout closes a connection not admitted within it (with
	// authentication on: on which no call with a known token came); 0
	// means never.
	PendingTimeout time.Duration
	// MaxConcurrentStreams bounds the calls open at once on one
	// connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more are
	// refused. 0 means gRPC's default, no bound.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a call's request headers
	// (SETTINGS_MAX_HEADER_LIST_SIZE); a call with more is refused.
	MaxHeaderBytes uint32
	// MaxHealthStreams bounds the health calls open at once on this
	// replica: they are the calls anyone may make without a token.
	MaxHealthStreams int
	// KeepAliveTime is how long a connection may be idle before lockd
	// pings it, and KeepAliveTimeout how long lockd then waits for the
	// answer before it drops the connection, ending its calls as if the
	// client had closed them.
	KeepAliveTime, KeepAliveTimeout time.Duration
	// KeepAliveMinTime is the shortest interval at which clients may ping
	// lockd; a client pinging more often is disconnected.
	KeepAliveMinTime time.Duration
	// MaxConnectionIdle closes a connection that has had no call for this
	// long; 0 means never.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge asks a client to reconnect once its connection is
	// this old (give or take a tenth), and MaxConnectionAgeGrace is how
	// long its open calls may go on after that; 0 means never, and no
	// bound on the grace.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// handshakeTimeout bounds a new connection's TLS and HTTP/2 handshake.
const handshakeTimeout = 10 * time.Second

// DefaultTransport are the bounds lockd starts with (see docs/security.md,
// "Bounds on what a caller can cost", for what they cost at most).
func DefaultTransport() Transport {
	return Transport{
		MaxConnections:        1000,
		MaxPendingConnections: 200,
		PendingTimeout:        10 * time.Second,
		MaxConcurrentStreams:  1000,
		MaxHeaderBytes:        16 << 10,
		MaxHealthStreams:      100,
		KeepAliveTime:         10 * time.Second,
		KeepAliveTimeout:      5 * time.Second,
		KeepAliveMinTime:      5 * time.Second,
		MaxConnectionIdle:     5 * time.Minute,
	}
}

// Validate reports bounds that cannot work.
func (t Transport) Validate() error {
	switch {
	case t.MaxConnections < 0 || t.MaxHealthStreams < 0 || t.MaxPendingConnections < 0:
		return fmt.Errorf("--max-connections, --max-pending-connections and --max-health-streams must not be negative")
	case t.PendingTimeout < 0:
		return fmt.Errorf("--pending-timeout must not be negative")
	case t.KeepAliveTime < time.Second:
		return fmt.Errorf("--keepalive-time must be at least 1s, got %v", t.KeepAliveTime)
	case t.KeepAliveTimeout < 100*time.Millisecond:
		return fmt.Errorf("--keepalive-timeout must be at least 100ms, got %v", t.KeepAliveTimeout)
	case t.KeepAliveMinTime < 0 || t.MaxConnectionIdle < 0 || t.MaxConnectionAge < 0 || t.MaxConnectionAgeGrace < 0:
		return fmt.Errorf("connection durations must not be negative")
	case t.MaxHeaderBytes > 0 && t.MaxHeaderBytes < 1024:
		return fmt.Errorf("--max-header-bytes must be at least 1024, got %d", t.MaxHeaderBytes)
	}
	return nil
}

// serverOptions are the gRPC server options that apply t.
func (t Transport) serverOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  t.KeepAliveTime,
			Timeout:               t.KeepAliveTimeout,
			MaxConnectionIdle:     t.MaxConnectionIdle,
			MaxConnectionAge:      t.MaxConnectionAge,
			MaxConnectionAgeGrace: t.MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: t.KeepAliveMinTime,
			// Clients that keep idle connections alive (grpc-java's
			// keepAliveWithoutCalls, Go's PermitWithoutStream) are
			// well-behaved too.
			PermitWithoutStream: true,
		}),
	}
	if t.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(t.MaxConcurrentStreams))
	}
	if t.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(t.MaxHeaderBytes))
	}
	return opts
}

// guard returns the connguard options of t for a listener; event is told
// of each connection refused or closed.
func (t Transport) guard(event func(reason string)) connguard.Options {
	return connguard.Options{Max: t.MaxConnections, MaxPending: t.MaxPendingConnections, PendingTimeout: t.PendingTimeout, Event: event}
}
