// Package gateway serves lockd's gRPC services over HTTP/JSON
// (grpc-gateway v2) for callers without a gRPC stack: PHP, shell scripts,
// curl.
//
// The mapping of RPCs to URLs is proto/lockd/v1/gateway.yaml; the handlers
// are generated from it into internal/gw/lockd/v1/*.pb.gw.go, apart from
// the messages so that Go clients never link grpc-gateway. Every HTTP
// request becomes a call on lockd's own grpc.Server, over an in-memory
// connection of its client's own (see tenants), so it passes the same
// interceptors as any gRPC call: the bearer token of its Authorization
// header is checked, validation and limits apply, and the gRPC status comes
// back as the HTTP status with a JSON body holding the code, message and
// details (google.rpc.Status).
package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/connguard"
	lockdv1gw "github.com/lockd/lockd/internal/gw/lockd/v1"
	"github.com/lockd/lockd/internal/httpbound"
)

// services maps each gRPC service the gateway serves to its generated
// registration. A service whose RPCs get their first rule in gateway.yaml
// adds its Register<Service>HandlerClient here.
var services = map[string]func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error{
	lockdv1.LockService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterLockServiceHandlerClient(ctx, mux, lockdv1.NewLockServiceClient(cc))
	},
	lockdv1.TokenService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterTokenServiceHandlerClient(ctx, mux, lockdv1.NewTokenServiceClient(cc))
	},
	lockdv1.ElectionService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterElectionServiceHandlerClient(ctx, mux, lockdv1.NewElectionServiceClient(cc))
	},
	lockdv1.SemaphoreService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterSemaphoreServiceHandlerClient(ctx, mux, lockdv1.NewSemaphoreServiceClient(cc))
	},
	lockdv1.AdminService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterAdminServiceHandlerClient(ctx, mux, lockdv1.NewAdminServiceClient(cc))
	},
	lockdv1.RateLimitService_ServiceDesc.ServiceName: func(ctx context.Context, mux *runtime.ServeMux, cc grpc.ClientConnInterface) error {
		return lockdv1gw.RegisterRateLimitServiceHandlerClient(ctx, mux, lockdv1.NewRateLimitServiceClient(cc))
	},
}

// Bounds of the HTTP server. Requests are small JSON objects: the largest
// lockd takes is well under 2 KiB.
const (
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes = 64 << 10
	// MaxHeaderBytes bounds a request's header (net/http adds 4 KiB of
	// slack); a larger one gets 431.
	MaxHeaderBytes = 16 << 10
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request header.
	ReadHeaderTimeout = 10 * time.Second
	// BodyTimeout bounds how long a client may take to send its body.
	BodyTimeout = 30 * time.Second
	// WriteTimeout bounds each write of a response: a client that stops
	// reading has its connection closed, which ends its call. There is no
	// bound on the whole response, as waits and KeepAlive streams are long.
	WriteTimeout = 30 * time.Second
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout = 2 * time.Minute
)

// Options configure Start.
type Options struct {
	// Listen is the HTTP address.
	Listen string
	// TLS, when set, serves HTTPS (and HTTP/2) with this configuration,
	// client certificates included.
	TLS *tls.Config
	// Logger receives the HTTP server's own errors (at DEBUG: they are
	// about clients, such as failed TLS handshakes).
	Logger *slog.Logger
	// Authenticated reports whether lockd requires bearer tokens (it may
	// change when the configuration is reloaded); nil means it does not.
	// Without authentication and TLS the gateway answers only requests
	// addressed to an IP address, localhost, Listen's host or one of
	// Hosts, so that no web page reaches it through DNS rebinding.
	Authenticated func() bool
	// Hosts are further host names the gateway answers to without
	// authentication.
	Hosts []string
	// MaxConnections bounds the HTTP connections open at once; more wait
	// to be accepted, and while all are open idle keep-alive connections
	// are closed (see httpbound). 0 means no bound.
	MaxConnections int
	// Identify names the client whose bearer token an Authorization
	// header carries (false for none, or an unknown token). Each client
	// it names gets in-memory connections to lockd of its own, so that
	// one client's open HTTP calls never take another's share of
	// --max-concurrent-streams. Nil puts every caller on one connection.
	Identify func(authorization string) (string, bool)
	// Guard, if set, wraps the gateway's listener in a connguard.Listener
	// (see package connguard): a connection is then admitted by the first
	// request that carries a token Identify knows (with authentication
	// off, by any request), for at most Share(client) connections of that
	// client (0: no share of its own), and a request that finds no place
	// is refused 503 (429 past its client's share).
	Guard func(net.Listener) net.Listener
	// Share is the most connections a client may have admitted; nil means
	// no bound of its own.
	Share func(client string) int
	// HandshakeFailed, if set, is told the reason of each failed TLS
	// handshake: client_certificate (missing or not trusted), timeout, or
	// other.
	HandshakeFailed func(reason string)
}

// Gateway is a running HTTP/JSON gateway.
type Gateway struct {
	srv     *http.Server
	lis     net.Listener
	pipe    *pipe
	tenants *tenants
	done    chan struct{}
}

// Start serves the services of gs over HTTP/JSON on opts.Listen. gs serves
// the gateway's in-memory connections: lockd's services registered on it,
// with ServerOptions among its options, credentials from Credentials when
// it serves TLS, and no --max-connection-age (the in-memory connections are
// lockd's own, one per client: moving them to another replica is no use,
// and an age would cut long HTTP streams). It may be lockd's own server
// where no age is set. The gateway stops with Shutdown, or when gs stops.
func Start(gs *grpc.Server, opts Options) (*Gateway, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", opts.Listen, err)
	}
	p := newPipe()
	go func() { _ = gs.Serve(p) }()
	conns, err := newTenants(p, opts.Identify, opts.Authenticated, opts.Share)
	if err != nil {
		lis.Close()
		p.Close()
		return nil, err
	}
	h, err := handler(conns, newBrowserGuard(opts))
	if err != nil {
		lis.Close()
		conns.close()
		p.Close()
		return nil, err
	}
	g := &Gateway{
		srv: &http.Server{
			Handler:           h,
			TLSConfig:         opts.TLS,
			ReadHeaderTimeout: ReadHeaderTimeout,
			IdleTimeout:       IdleTimeout,
			MaxHeaderBytes:    MaxHeaderBytes,
			ErrorLog:          serverLog(log, opts.HandshakeFailed),
			ConnContext:       connguard.ConnContext,
		},
		pipe: p, tenants: conns, done: make(chan struct{}),
	}
	if opts.Guard != nil {
		httpbound.Reclaim(g.srv, opts.MaxConnections)
		g.lis = opts.Guard(lis)
	} else {
		g.lis = httpbound.Limit(g.srv, lis, opts.MaxConnections)
	}
	go func() {
		defer close(g.done)
		var err error
		if opts.TLS != nil {
			err = g.srv.ServeTLS(g.lis, "", "")
		} else {
			err = g.srv.Serve(g.lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway server", "err", err)
		}
	}()
	return g, nil
}

// Addr is the address the gateway listens on.
func (g *Gateway) Addr() string { return g.lis.Addr().String() }

// Shutdown stops accepting requests, lets those in flight finish until ctx
// ends, then closes every connection and the in-memory gRPC connections.
func (g *Gateway) Shutdown(ctx context.Context) error {
	err := g.srv.Shutdown(ctx)
	if err != nil {
		_ = g.srv.Close()
	}
	<-g.done
	g.tenants.close()
	_ = g.pipe.Close()
	return err
}

// handler returns the HTTP handler of the gateway, calling lockd through
// each caller's connection: the generated handlers of every mapped service
// behind the browser guard, the tenants' connections and the body, header
// and write limits.
func handler(conns *tenants, guard *browserGuard) (http.Handler, error) {
	mux := runtime.NewServeMux(
		// JSON in and out. Fields at their zero value are written out
		// ("acquired": false, "holdCount": 0), and an unknown field in a
		// request is an error rather than silently ignored: a misspelt
		// "request_id" must not turn a safe retry into a second grant.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, compactJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		// Every percent-escape in a path decodes, %2F included, so a key
		// may be sent with its slashes as they are or escaped.
		runtime.WithUnescapingMode(runtime.UnescapingModeAllCharacters),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		// The HTTP caller's address, for lockd's logs (see callerPeer).
		runtime.WithMetadata(callerMetadata),
		// lockd sends no response metadata worth an HTTP header.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithDisablePathLengthFallback(),
	)
	for name, register := range services {
		if err := register(context.Background(), mux, conns); err != nil {
			return nil, fmt.Errorf("gateway: register %s: %w", name, err)
		}
	}
	return guard.wrap(conns.wrap(defaultRequestBounds.wrap(challenge(mux), mux), mux), mux), nil
}

// incomingHeader picks the HTTP headers passed on to lockd as gRPC
// metadata, besides Authorization (always passed on as "authorization")
// and Grpc-Timeout (the call's deadline): W3C trace context, so a trace
// spans the HTTP client and lockd.
func incomingHeader(key string) (string, bool) {
	switch key {
	case "Traceparent", "Tracestate":
		return key, true
	}
	return "", false
}

// challenge answers 401 with a standard challenge (grpc-gateway puts the
// error message there, or nothing on a stream).
func challenge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(challengeWriter{w}, r)
	})
}

type challengeWriter struct{ http.ResponseWriter }

func (c challengeWriter) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		c.Header().Set("WWW-Authenticate", `Bearer realm="lockd"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c challengeWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// compactJSON writes JSON without insignificant spaces. protojson adds a
// space after some commas, differently from one build to the next, to keep
// programs from depending on its exact bytes; shell scripts that pick a
// field out with sed do, so the gateway's answers are compacted.
type compactJSON struct{ *runtime.JSONPb }

func (c compactJSON) Marshal(v any) ([]byte, error) {
	b, err := c.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
