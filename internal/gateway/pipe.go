package gateway

import (
	"context"
	"net"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// pipe is the in-memory listener through which the gateway calls lockd's
// grpc.Server: nothing outside the process can reach it.
type pipe struct{ *bufconn.Listener }

func newPipe() *pipe { return &pipe{bufconn.Listen(256 << 10)} }

// pipeConn marks the connections of a pipe, so Credentials can tell them
// from the network's, and lockd its calls (see callerPeer).
type pipeConn struct{ net.Conn }

// RemoteAddr is pipeAddr: only the gateway's connections have it.
func (pipeConn) RemoteAddr() net.Addr { return pipeAddr{} }

func (p *pipe) Accept() (net.Conn, error) {
	c, err := p.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return pipeConn{c}, nil
}

// dial returns a client connection to lockd over the pipe. Its interceptors
// refuse a request holding invalid UTF-8 (from a percent-escaped path, say)
// with INVALID_ARGUMENT naming the field, as lockd does for gRPC callers:
// such a request cannot be encoded to reach lockd at all.
func (p *pipe) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///lockd-gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return p.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if err := validUTF8(req); err != nil {
				return err
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return checkedStream{s}, nil
		}),
	)
}

type checkedStream struct{ grpc.ClientStream }

func (s checkedStream) SendMsg(m any) error {
	if err := validUTF8(m); err != nil {
		// End the call: lockd never sees this stream's request.
		_ = s.CloseSend()
		return err
	}
	return s.ClientStream.SendMsg(m)
}

// validUTF8 returns INVALID_ARGUMENT naming the first string field of req
// that is not valid UTF-8. lockd's requests are flat, so the top level is
// all there is to check.
func validUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	var bad protoreflect.Name
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated && !utf8.ValidString(v.String()) {
			bad = fd.Name()
			return false
		}
		return true
	})
	if bad != "" {
		return status.Errorf(codes.InvalidArgument, "%s must be valid UTF-8", bad)
	}
	return nil
}

// Credentials wraps the transport credentials of lockd's grpc.Server (TLS)
// so that the gateway's in-memory connections need no handshake: they
// never leave the process, and the gateway's own listener serves TLS with
// the same certificates and client CA. Connections from the network go
// through creds unchanged.
func Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return pipeCredentials{creds}
}

type pipeCredentials struct {
	credentials.TransportCredentials
}

func (c pipeCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(pipeConn); ok {
		return conn, pipeAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c pipeCredentials) Clone() credentials.TransportCredentials {
	return pipeCredentials{c.TransportCredentials.Clone()}
}

// pipeAuthInfo describes an in-memory connection: private to the process.
type pipeAuthInfo struct{ credentials.CommonAuthInfo }

func (pipeAuthInfo) AuthType() string { return "in-process" }
