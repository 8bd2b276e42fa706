package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"google.golang.org/grpc"
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

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by client name; "" for the rest
	closed bool
}

var errClosed = errors.New("gateway: closed")

func newTenants(p *pipe, identify func(string) (string, bool), authenticated func() bool) (*tenants, error) {
	if identify == nil {
		identify = func(string) (string, bool) { return "", false }
	}
	if authenticated == nil {
		authenticated = func() bool { return false }
	}
	t := &tenants{pipe: p, identify: identify, authenticated: authenticated, conns: map[string]*grpc.ClientConn{}}
	// The shared connection is made at once, so that a failure shows at
	// start-up.
	if _, err := t.conn(""); err != nil {
		return nil, err
	}
	return t, nil
}

type tenantKey struct{}

// wrap tells next's calls whose connection to use, and drops the body of
// a request lockd will refuse for want of a known token.
func (t *tenants) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := t.identify(r.Header.Get("Authorization"))
		if !ok && t.authenticated() {
			r.Body, r.ContentLength = http.NoBody, 0
			// The body, unread, is still on the connection.
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, name)))
	})
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
