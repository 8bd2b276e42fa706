package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/connguard"
)

// tenants gives each client of lockd in-memory connections of its own to
// lockd's gRPC server. lockd bounds the calls open at once on one
// connection (--max-concurrent-streams), and gRPC makes calls beyond the
// bound wait for a place: over one shared connection, one client keeping
// that many HTTP calls open (waiting acquires, KeepAlive streams) would
// make every other client's HTTP calls wait. With a connection per client,
// a client fills only its own, as over gRPC, and the per-client and
// replica-wide limits bound the rest.
//
// Callers are told apart by identify, from their Authorization header;
// everyone it does not name (no token, an unknown one, or authentication
// off) shares one connection. Names come from lockd's configuration, so
// the connections are as many as its clients, plus one. While
// authenticated reports true, a caller identify does not name will be
// refused by lockd as its call arrives, so its request body is not read
// at all: it costs the gateway no wait and no buffer.
type tenants struct {
	pipe          *pipe
	identify      func(authorization string) (string, bool)
	authenticated func() bool
	share         func(client string) int

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by client name; "" for the rest
	closed bool
}

var errClosed = errors.New("gateway: closed")

func newTenants(p *pipe, identify func(string) (string, bool), authenticated func() bool, share func(string) int) (*tenants, error) {
	if identify == nil {
		identify = func(string) (string, bool) { return "", false }
	}
	if authenticated == nil {
		authenticated = func() bool { return false }
	}
	if share == nil {
		share = func(string) int { return 0 }
	}
	t := &tenants{pipe: p, identify: identify, authenticated: authenticated, share: share, conns: map[string]*grpc.ClientConn{}}
	// The shared connection is made at once, so that a failure shows at
	// start-up.
	if _, err := t.conn(""); err != nil {
		return nil, err
	}
	return t, nil
}

type tenantKey struct{}

// wrap tells next's calls whose connection to use, admits the HTTP
// connection of a request lockd will let in (see connguard), and drops
// the body of a request lockd will refuse for want of a known token.
func (t *tenants) wrap(next http.Handler, mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := t.identify(r.Header.Get("Authorization"))
		authenticated := t.authenticated()
		if !ok && authenticated {
			r.Body, r.ContentLength = http.NoBody, 0
			// The body, unread, is still on the connection.
			w.Header().Set("Connection", "close")
		} else if err := connguard.Admit(r.Context(), name, t.share(name)); err != nil {
			refuseUnplaced(w, r, mux, name, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, name)))
	})
}

// refuseUnplaced answers a request whose connection found no place: 503
// and UNAVAILABLE when every place is taken, 429 and RESOURCE_EXHAUSTED
// when its client has its share; the connection closes after it.
func refuseUnplaced(w http.ResponseWriter, r *http.Request, mux *runtime.ServeMux, client string, err error) {
	st := &runtime.HTTPStatusError{HTTPStatus: http.StatusServiceUnavailable,
		Err: status.Error(codes.Unavailable, "the gateway has all of its connection places taken; retry, or use another replica")}
	if errors.Is(err, connguard.ErrClientShare) {
		st = &runtime.HTTPStatusError{HTTPStatus: http.StatusTooManyRequests,
			Err: status.Errorf(codes.ResourceExhausted, "client %q has as many connections open on the gateway as it may: reuse connections (HTTP keep-alive)", client)}
	}
	w.Header().Set("Connection", "close")
	_, m := runtime.MarshalerForRequest(mux, r)
	runtime.HTTPError(r.Context(), mux, m, w, r, st)
}

// conn returns the connection of the client named name, dialing it the
// first time.
func (t *tenants) conn(name string) (*grpc.ClientConn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	if c, ok := t.conns[name]; ok {
		return c, nil
	}
	c, err := t.pipe.dial()
	if err != nil {
		return nil, err
	}
	t.conns[name] = c
	return c, nil
}

func (t *tenants) of(ctx context.Context) (*grpc.ClientConn, error) {
	name, _ := ctx.Value(tenantKey{}).(string)
	return t.conn(name)
}

// Invoke makes a unary call on the caller's connection (a
// grpc.ClientConnInterface, for the generated clients).
func (t *tenants) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c, err := t.of(ctx)
	if err != nil {
		return err
	}
	return c.Invoke(ctx, method, args, reply, opts...)
}

// NewStream opens a stream on the caller's connection.
func (t *tenants) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c, err := t.of(ctx)
	if err != nil {
		return nil, err
	}
	return c.NewStream(ctx, desc, method, opts...)
}

// close closes every connection.
func (t *tenants) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, c := range t.conns {
		_ = c.Close()
	}
}
