// Package auth lets in only the clients lockd knows: each presents a bearer
// token ("authorization: Bearer <token>"), compared in constant time, and
// may lock only keys under its prefixes and read only its apps' tokens.
// Health checks stay open.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Client is one caller lockd lets in.
type Client struct {
	// Name names the client in logs; never its token.
	Name string
	// Token is the bearer token the client sends.
	Token string
	// Locks are the key prefixes it may lock; "" allows every key.
	Locks []string
	// Apps are the apps whose access tokens it may read.
	Apps []string
}

// ErrNoClients is returned by New for an empty client list: auth that lets
// nobody in is a configuration mistake.
var ErrNoClients = errors.New("auth: no clients configured")

// Authenticator checks bearer tokens and ACLs.
type Authenticator struct {
	clients []client
}

type client struct {
	name  string
	hash  [sha256.Size]byte
	locks []string
	apps  map[string]bool
}

// New returns an Authenticator for clients. Every client needs a name and a
// non-empty token, and no two may share a token.
func New(clients []Client) (*Authenticator, error) {
	if len(clients) == 0 {
		return nil, ErrNoClients
	}
	a := &Authenticator{}
	seen := map[[sha256.Size]byte]string{}
	for i, c := range clients {
		if c.Name == "" {
			return nil, fmt.Errorf("auth: client %d: name must not be empty", i)
		}
		if c.Token == "" {
			return nil, fmt.Errorf("auth: client %q: token must not be empty", c.Name)
		}
		h := sha256.Sum256([]byte(c.Token))
		if other, dup := seen[h]; dup {
			return nil, fmt.Errorf("auth: clients %q and %q share a token", other, c.Name)
		}
		seen[h] = c.Name
		apps := map[string]bool{}
		for _, app := range c.Apps {
			apps[app] = true
		}
		a.clients = append(a.clients, client{name: c.Name, hash: h, locks: c.Locks, apps: apps})
	}
	return a, nil
}

type clientKey struct{}

// ClientName returns the name of the authenticated client of ctx, if any.
func ClientName(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clientKey{}).(*client)
	if !ok {
		return "", false
	}
	return c.name, true
}

// authenticate finds the client whose token the call carries. Every
// client's token hash is compared, so the time taken does not tell which
// client, or how much of a token, matched.
func (a *Authenticator) authenticate(ctx context.Context) (context.Context, error) {
	token, err := grpcauth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "missing or malformed authorization: want \"authorization: Bearer <token>\"")
	}
	h := sha256.Sum256([]byte(token))
	var found *client
	for i := range a.clients {
		if subtle.ConstantTimeCompare(h[:], a.clients[i].hash[:]) == 1 {
			found = &a.clients[i]
		}
	}
	if found == nil {
		return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	return context.WithValue(ctx, clientKey{}, found), nil
}

// authorize checks a request of method against the client's ACLs. A
// request naming neither a key nor an app is allowed only for server
// reflection: a method added later is denied until it is thought about.
func authorize(ctx context.Context, method string, req any) error {
	c, ok := ctx.Value(clientKey{}).(*client)
	if !ok {
		return status.Error(codes.Unauthenticated, "not authenticated")
	}
	if r, ok := req.(interface{ GetKey() string }); ok {
		key := r.GetKey()
		for _, p := range c.locks {
			if strings.HasPrefix(key, p) {
				return nil
			}
		}
		return status.Errorf(codes.PermissionDenied, "client %q may not lock key %q", c.name, key)
	}
	if r, ok := req.(interface{ GetApp() string }); ok {
		if c.apps[r.GetApp()] {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "client %q may not read tokens of app %q", c.name, r.GetApp())
	}
	if strings.HasPrefix(method, "/grpc.reflection.") {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "client %q may not call %s", c.name, method)
}

// open tells which calls need no token: health checks.
var open = selector.MatchFunc(func(_ context.Context, meta interceptors.CallMeta) bool {
	return meta.Service != healthpb.Health_ServiceDesc.ServiceName
})

// UnaryInterceptor authenticates and authorizes unary calls; health stays
// open.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	check := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := a.authenticate(ctx)
		if err != nil {
			return nil, err
		}
		if err := authorize(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	return selector.UnaryServerInterceptor(check, open)
}

// StreamInterceptor authenticates streams and authorizes each message a
// client sends on them; health stays open.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	check := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.authenticate(ss.Context())
		if err != nil {
			return err
		}
		return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx, method: info.FullMethod})
	}
	return selector.StreamServerInterceptor(check, open)
}

type authorizedStream struct {
	grpc.ServerStream
	ctx    context.Context
	method string
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return authorize(s.ctx, s.method, m)
}
