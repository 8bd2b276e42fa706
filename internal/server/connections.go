package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/connguard"
	"github.com/lockd/lockd/internal/telemetry"
)

// Each listener (gRPC, the gateway, the HTTP port) keeps the connections
// that have shown they are wanted apart from those that have not (see
// package connguard): with authentication on, a connection counts
// against --max-connections only once a call with a known token came on
// it; until then it is one of --max-pending-connections, closed after
// --pending-timeout, and the first to give way when more come. So callers
// without a token, however many connections they open and however slowly
// they send, never take the places of clients with one.

// refusedGrace is how long a connection whose call was refused for want
// of a place stays open, so that the refusal reaches its client.
const refusedGrace = time.Second

// connections guards the listeners of one lockd.
type connections struct {
	t       Transport
	authn   *auth.Authenticator
	metrics *telemetry.SecurityMetrics
	log     *summary
}

func newConnections(ctx context.Context, t Transport, authn *auth.Authenticator, metrics *telemetry.SecurityMetrics, log *slog.Logger) *connections {
	// Refusals under pressure are logged as a summary per interval;
	// pending connections that time out are counted only: browsers and
	// scrapers leave idle keep-alive connections, and that is no attack.
	sum := newSummary(log, "connections refused or closed to keep places for clients with a token", 10*time.Second)
	go sum.run(ctx)
	return &connections{t: t, authn: authn, metrics: metrics, log: sum}
}

// guard wraps the listener called name.
func (c *connections) guard(lis net.Listener, name string) net.Listener {
	g := connguard.New(lis, c.t.guard(func(reason string) {
		c.metrics.ConnectionRefused(name, reason)
		if reason != connguard.ReasonPendingTimeout {
			c.log.add(name + "_" + reason)
		}
	}))
	c.metrics.RegisterConnections(name, g.Counts)
	return g
}

// share is the most connections of a listener client id may have: its
// own limits.connections, or, with two or more clients configured, half
// of --max-connections; 0 for no bound of its own.
func (c *connections) share(id auth.Identity) int {
	switch {
	case id.Limits.Connections > 0:
		return id.Limits.Connections
	case id.FairShare && c.t.MaxConnections > 0:
		return max(1, c.t.MaxConnections/2)
	}
	return 0
}

// shareOf is share for the client named name (0 for none).
func (c *connections) shareOf(name string) int {
	id, ok := c.authn.Client(name)
	if !ok {
		return 0
	}
	return c.share(id)
}

// admitCall admits the connection of an authenticated (or, without
// authentication, any) gRPC call; the error is the call's status.
func (c *connections) admitCall(ctx context.Context) error {
	id, _ := auth.FromContext(ctx)
	err := connguard.Admit(ctx, id.Name, c.share(id))
	if err == nil {
		return nil
	}
	connguard.CloseSoon(ctx, refusedGrace)
	if errors.Is(err, connguard.ErrClientShare) {
		return status.Errorf(codes.ResourceExhausted, "client %q has as many connections open on this replica as it may (%d): share connections between calls", id.Name, c.share(id))
	}
	return status.Errorf(codes.Unavailable, "this replica has all of its %d connection places taken; retry, or use another replica", c.t.MaxConnections)
}

// admitHTTP admits the connection of each request to next that needs a
// place: one carrying a known client's token, or, without
// authentication, any but the probes. Probes (/healthz, /readyz) and
// calls without a token are served on the connection as it is: they
// cost no place, and the pending pool bounds them.
func (c *connections) admitHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || connguard.Admitted(r.Context()) {
			next.ServeHTTP(w, r)
			return
		}
		var err error
		if c.authn.Enabled() {
			if id, ok := c.authn.IdentityOf(r.Header.Get("Authorization")); ok {
				err = connguard.Admit(r.Context(), id.Name, c.share(id))
			}
		} else {
			err = connguard.Admit(r.Context(), "", 0)
		}
		if err != nil {
			w.Header().Set("Connection", "close")
			code := http.StatusServiceUnavailable
			if errors.Is(err, connguard.ErrClientShare) {
				code = http.StatusTooManyRequests
			}
			http.Error(w, "no connection place for this request: "+err.Error(), code)
			return
		}
		next.ServeHTTP(w, r)
	})
}
