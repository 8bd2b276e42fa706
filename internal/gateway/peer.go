package gateway

import (
	"context"
	"net"
	"net/http"
	"net/netip"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// peerMetadata carries an HTTP caller's address from the gateway to lockd
// over the in-memory connection. lockd believes it only on a connection
// of the gateway's own (pipeAddr, which nothing outside this package can
// make), so a gRPC caller from the network cannot forge it; and no HTTP
// header becomes it (see incomingHeader), so an HTTP caller cannot either.
const peerMetadata = "lockd-gateway-peer"

// pipeAddr is the remote address of the gateway's in-memory connections.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "bufconn" }
func (pipeAddr) String() string  { return "gateway" }

// subjectMetadata carries the subject of an HTTPS caller's verified
// client certificate to lockd, believed as peerMetadata is: only on the
// gateway's own connections, and never from an HTTP header.
const subjectMetadata = "lockd-gateway-tls-subject"

// callerMetadata is the metadata the gateway adds to each call: the HTTP
// caller's address, and the subject of its verified client certificate.
func callerMetadata(_ context.Context, r *http.Request) metadata.MD {
	md := metadata.Pairs(peerMetadata, r.RemoteAddr)
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		md.Set(subjectMetadata, r.TLS.VerifiedChains[0][0].Subject.String())
	}
	return md
}

// CertSubject returns the subject (RFC 2253) of the verified client
// certificate of a call that came through the gateway over HTTPS; false
// for any other call.
func CertSubject(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	if _, pipe := p.AuthInfo.(pipeAuthInfo); !pipe {
		return "", false
	}
	vals := metadata.ValueFromIncomingContext(ctx, subjectMetadata)
	if len(vals) != 1 {
		return "", false
	}
	return vals[0], true
}

// ServerOptions are the options the grpc.Server given to Start needs
// besides lockd's own: they make each call through the gateway's peer (as
// logs and telemetry see it) its HTTP caller's address.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StatsHandler(callerPeer{})}
}

// callerPeer is a stats.Handler that gives calls through the gateway
// their HTTP caller's address as their peer.
type callerPeer struct{}

func (callerPeer) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ctx
	}
	if _, pipe := p.Addr.(pipeAddr); !pipe {
		return ctx
	}
	vals := metadata.ValueFromIncomingContext(ctx, peerMetadata)
	if len(vals) != 1 {
		return ctx
	}
	ap, err := netip.ParseAddrPort(vals[0])
	if err != nil {
		return ctx
	}
	return peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap), LocalAddr: p.LocalAddr, AuthInfo: p.AuthInfo})
}

func (callerPeer) HandleRPC(context.Context, stats.RPCStats) {}

func (callerPeer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (callerPeer) HandleConn(context.Context, stats.ConnStats) {}
