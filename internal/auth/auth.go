// Package auth lets in only the clients lockd knows: each presents a bearer
// token ("authorization: Bearer <token>"), compared in constant time, and
// may lock only keys (and take part only in elections) under its prefixes
// and read only its apps' tokens.
// Health checks stay open.
//
// Tokens are checked when a stream's headers arrive (TapHandle), before
// the stream costs lockd a goroutine or a byte of its message; the
// interceptors then check each request against the client's ACLs. Handlers
// learn who called with FromContext. The client list can be replaced while
// lockd runs (Replace), so a configuration reload rotates tokens live, and
// calls under way that the new list would refuse end then (follow.go).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/lockd/lockd/internal/config"
	"github.com/lockd/lockd/internal/redislock"
	"github.com/lockd/lockd/internal/safetext"
)

// Identity is an authenticated caller, as handlers see it.
type Identity struct {
	// Name is the client's name from the configuration; it appears in
	// logs, never its token.
	Name string
	// Limits are the client's own limits (limits: in its auth.clients
	// entry).
	Limits config.Limits
	// Admin allows the administrative calls.
	Admin bool
	// FairShare is set when two or more clients are configured: a limit
	// the client has not set (zero in Limits) is then its fair share of
	// the replica-wide pool, not the whole pool.
	FairShare bool
}

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
	// Limits are the client's own limits (limits: in its auth.clients
	// entry).
	Limits config.Limits
	// Admin allows the administrative calls.
	Admin bool
	// TLSSubject, when set, is the subject distinguished name (RFC 2253)
	// the verified certificate of the client's connection must have.
	TLSSubject string
}

// ErrNoClients is returned by New for an empty client list: auth that lets
// nobody in is a configuration mistake.
var ErrNoClients = errors.New("auth: no clients configured")

// The reasons a call is refused, as told to the OnRefused callback.
const (
	// ReasonMissing: no authorization header, or not "Bearer <token>".
	ReasonMissing = "missing_token"
	// ReasonUnknown: a bearer token no client has.
	ReasonUnknown = "unknown_token"
	// ReasonDenied: a known client asked for a key or app outside its
	// lists, or for a call it may not make.
	ReasonDenied = "permission_denied"
	// ReasonRevoked: a call under way that a reload of the client list
	// ended (see Replace).
	ReasonRevoked = "revoked"
	// ReasonTLSSubject: a client's token over a connection without the
	// client certificate its tls_subject requires.
	ReasonTLSSubject = "tls_subject"
)

// Option tunes an Authenticator.
type Option func(*Authenticator)

// OnRefused sets a function told the reason (ReasonMissing, ReasonUnknown,
// ReasonDenied, ReasonRevoked) of every refused call; it must be fast and safe for
// concurrent use.
func OnRefused(f func(reason string)) Option {
	return func(a *Authenticator) { a.refused = f }
}

// CertSubject tells the call's certificate subject (see WithCertSubject).
type CertSubject func(ctx context.Context) (subject string, ok bool)

// WithCertSubject sets how the subject of a call's verified client
// certificate is found, for clients with a TLSSubject; by default it is
// the peer's, when the call came over mutual TLS (PeerCertSubject).
func WithCertSubject(f CertSubject) Option {
	return func(a *Authenticator) { a.subject = f }
}

// PeerCertSubject returns the subject (RFC 2253) of the verified client
// certificate of the call's connection; false without one.
func PeerCertSubject(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", false
	}
	return info.State.VerifiedChains[0][0].Subject.String(), true
}

// Authenticator checks bearer tokens and ACLs. A nil or open Authenticator
// lets every call in.
type Authenticator struct {
	clients atomic.Pointer[clientSet] // nil: authentication off
	// epoch ends when Replace puts another client list in force; calls
	// under way then check they are still allowed (see follow).
	epoch   atomic.Pointer[epoch]
	refused func(reason string)
	subject CertSubject
}

type clientSet struct {
	clients []client
}

type client struct {
	id         Identity
	hash       [sha256.Size]byte
	locks      []string
	apps       map[string]bool
	tlsSubject string
	set        *clientSet // the list it came with
}

// New returns an Authenticator for clients. Every client needs a name and a
// non-empty token, and no two may share a token or a name.
func New(clients []Client, opts ...Option) (*Authenticator, error) {
	if len(clients) == 0 {
		return nil, ErrNoClients
	}
	a := Open(opts...)
	if err := a.Replace(clients); err != nil {
		return nil, err
	}
	return a, nil
}

// Open returns an Authenticator that lets every call in until Replace
// gives it clients.
func Open(opts ...Option) *Authenticator {
	a := &Authenticator{refused: func(string) {}, subject: PeerCertSubject}
	a.epoch.Store(newEpoch())
	for _, o := range opts {
		o(a)
	}
	return a
}

// Replace swaps the client list for clients, checked as New checks them;
// on error the list in force is kept. Every later call is checked against
// the new list, and so is every call under way: one the new list would
// refuse (its client gone, its token replaced, its key or app no longer
// in the client's lists, or no token while authentication is now on) ends
// with the status a new call would get; the others go on with the
// identity they were admitted with. An empty list turns authentication
// off.
func (a *Authenticator) Replace(clients []Client) error {
	if len(clients) == 0 {
		a.clients.Store(nil)
		a.newEpoch()
		return nil
	}
	set := &clientSet{}
	tokens := map[[sha256.Size]byte]string{}
	names := map[string]bool{}
	for i, c := range clients {
		if c.Name == "" {
			return fmt.Errorf("auth: client %d: name must not be empty", i)
		}
		if names[c.Name] {
			return fmt.Errorf("auth: client %q is listed twice", c.Name)
		}
		names[c.Name] = true
		if c.Token == "" {
			return fmt.Errorf("auth: client %q: token must not be empty", c.Name)
		}
		h := sha256.Sum256([]byte(c.Token))
		if other, dup := tokens[h]; dup {
			return fmt.Errorf("auth: clients %q and %q share a token", other, c.Name)
		}
		tokens[h] = c.Name
		apps := map[string]bool{}
		for _, app := range c.Apps {
			apps[app] = true
		}
		set.clients = append(set.clients, client{
			id:         Identity{Name: c.Name, Limits: c.Limits, Admin: c.Admin, FairShare: len(clients) >= 2},
			hash:       h,
			locks:      append([]string(nil), c.Locks...),
			apps:       apps,
			tlsSubject: c.TLSSubject,
			set:        set,
		})
	}
	a.clients.Store(set)
	a.newEpoch()
	return nil
}

// Enabled reports whether calls need a bearer token.
func (a *Authenticator) Enabled() bool { return a != nil && a.clients.Load() != nil }

type clientKey struct{}

// FromContext returns the authenticated client of a call's context; false
// when the call was not authenticated (authentication off, or health).
func FromContext(ctx context.Context) (Identity, bool) {
	c, ok := ctx.Value(clientKey{}).(*client)
	if !ok {
		return Identity{}, false
	}
	return c.id, true
}

// ClientName returns the name of the authenticated client of ctx, if any.
func ClientName(ctx context.Context) (string, bool) {
	id, ok := FromContext(ctx)
	return id.Name, ok
}

// IsOpen reports whether a method needs no token: the health checks.
func IsOpen(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/"+healthpb.Health_ServiceDesc.ServiceName+"/")
}

// TapHandle authenticates a stream as soon as its headers arrive, before
// gRPC gives it a goroutine or reads its message: a call without a known
// bearer token is refused UNAUTHENTICATED at once. Health stays open.
// Install it with grpc.InTapHandle; it is cheap and never blocks.
func (a *Authenticator) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !a.Enabled() || IsOpen(info.FullMethodName) {
		return ctx, nil
	}
	return a.authenticate(ctx)
}

// authenticate finds the client whose token the call carries.
func (a *Authenticator) authenticate(ctx context.Context) (context.Context, error) {
	set := a.clients.Load()
	if set == nil {
		return ctx, nil
	}
	if _, ok := ctx.Value(clientKey{}).(*client); ok {
		return ctx, nil // the tap did it
	}
	token, ok := bearerToken(ctx)
	if !ok {
		a.refused(ReasonMissing)
		return nil, status.Error(codes.Unauthenticated, "missing or malformed authorization: want \"authorization: Bearer <token>\"")
	}
	found := set.find(token)
	if found == nil {
		a.refused(ReasonUnknown)
		return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	if found.tlsSubject != "" {
		if subject, ok := a.subject(ctx); !ok || subject != found.tlsSubject {
			a.refused(ReasonTLSSubject)
			return nil, status.Errorf(codes.Unauthenticated, "client %q must connect with the client certificate its tls_subject names", found.id.Name)
		}
	}
	return context.WithValue(ctx, clientKey{}, found), nil
}

// MayLock reports whether the client named name is in the list in force
// and may lock key; true for every key while authentication is off.
func (a *Authenticator) MayLock(name, key string) bool {
	set := a.clients.Load()
	if set == nil {
		return true
	}
	for i := range set.clients {
		if set.clients[i].id.Name == name {
			return set.clients[i].mayLock(key)
		}
	}
	return false
}

// bearerToken reads the token of the call's "authorization: Bearer
// <token>" header. It looks up that one header rather than copying the
// call's whole metadata, as go-grpc-middleware's AuthFromMD does: every
// call pays for this.
func bearerToken(ctx context.Context) (string, bool) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return "", false
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return token, true
}

// find returns the client whose token is token, or nil. Every client's
// token hash is compared, so the time taken does not tell which client,
// or how much of a token, matched.
func (set *clientSet) find(token string) *client {
	h := sha256.Sum256([]byte(token))
	var found *client
	for i := range set.clients {
		if subtle.ConstantTimeCompare(h[:], set.clients[i].hash[:]) == 1 {
			found = &set.clients[i]
		}
	}
	return found
}

// Identify returns the name of the client whose bearer token an HTTP
// Authorization header value ("Bearer <token>") carries; false when
// authentication is off or the token is not a client's. Calls are still
// authenticated when they reach lockd: Identify only tells callers apart,
// as the HTTP/JSON gateway does to give each client calls of its own.
func (a *Authenticator) Identify(authorization string) (string, bool) {
	id, ok := a.IdentityOf(authorization)
	return id.Name, ok
}

// IdentityOf is Identify with the client's whole identity.
func (a *Authenticator) IdentityOf(authorization string) (Identity, bool) {
	set := a.clients.Load()
	if set == nil {
		return Identity{}, false
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return Identity{}, false
	}
	if c := set.find(token); c != nil {
		return c.id, true
	}
	return Identity{}, false
}

// Client returns the identity of the client named name in the list in
// force; false when there is none.
func (a *Authenticator) Client(name string) (Identity, bool) {
	set := a.clients.Load()
	if set == nil {
		return Identity{}, false
	}
	for i := range set.clients {
		if set.clients[i].id.Name == name {
			return set.clients[i].id, true
		}
	}
	return Identity{}, false
}

// MaxAppBytes bounds an app name in a request.
const MaxAppBytes = 128

// authorize checks a request of method against the client's ACLs.
func (a *Authenticator) authorize(ctx context.Context, method string, req any) error {
	c, ok := ctx.Value(clientKey{}).(*client)
	if !ok {
		return status.Error(codes.Unauthenticated, "not authenticated")
	}
	err := c.allows(method, req)
	if status.Code(err) == codes.PermissionDenied {
		a.refused(ReasonDenied)
	}
	return err
}

// allows checks a request of method against c's ACLs: a key (of a lock or
// a semaphore) or an election's name against its lock prefixes, an app
// against its apps. The key, name or app is validated first, so a
// malformed one is INVALID_ARGUMENT whoever asks. A request naming none of
// them is allowed only for server reflection: a method added later is
// denied until it is thought about.
func (c *client) allows(method string, req any) error {
	if strings.HasPrefix(method, adminService) {
		return c.allowsAdmin(method, req)
	}
	return c.allowsCall(method, req)
}

// allowsCall checks a request against c's lock prefixes and apps.
func (c *client) allowsCall(method string, req any) error {
	if r, ok := req.(interface{ GetKey() string }); ok {
		key := r.GetKey()
		if err := redislock.ValidateKey(key); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if c.mayLock(key) {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "client %q may not lock key %s", c.id.Name, safetext.Excerpt(key))
	}
	if r, ok := req.(interface{ GetName() string }); ok {
		// An election is the lock of its name: the same prefixes apply.
		name := r.GetName()
		if err := redislock.ValidateName(name); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if c.mayLock(name) {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "client %q may not take part in election %s", c.id.Name, safetext.Excerpt(name))
	}
	if r, ok := req.(interface{ GetApp() string }); ok {
		app := r.GetApp()
		if err := validApp(app); err != nil {
			return err
		}
		if c.apps[app] {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "client %q may not read tokens of app %s", c.id.Name, safetext.Excerpt(app))
	}
	if strings.HasPrefix(method, "/grpc.reflection.") {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "client %q may not call %s", c.id.Name, safetext.Excerpt(method))
}

// mayLock reports whether the client may lock key: it starts with one of
// its prefixes.
func (c *client) mayLock(key string) bool {
	for _, p := range c.locks {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func validApp(app string) error {
	switch {
	case app == "":
		return status.Error(codes.InvalidArgument, "app must not be empty")
	case len(app) > MaxAppBytes:
		return status.Errorf(codes.InvalidArgument, "app is %d bytes, longer than %d", len(app), MaxAppBytes)
	case strings.IndexFunc(app, unicode.IsControl) >= 0:
		return status.Error(codes.InvalidArgument, "app has a control character")
	}
	return nil
}

// closed tells which calls need a token: all but health checks.
var closed = selector.MatchFunc(func(_ context.Context, meta interceptors.CallMeta) bool {
	return meta.Service != healthpb.Health_ServiceDesc.ServiceName
})

// UnaryInterceptor authorizes unary calls (authenticating them first when
// TapHandle has not), and ends those that may wait when a reload takes
// away what let them in (see Replace); health stays open. Put it after the interceptors that
// refuse malformed requests, so those are INVALID_ARGUMENT for everyone.
func (a *Authenticator) UnaryInterceptor() grpc.UnaryServerInterceptor {
	check := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if a.Enabled() {
			var err error
			if ctx, err = a.authenticate(ctx); err != nil {
				return nil, err
			}
			if err := a.authorize(ctx, info.FullMethod, req); err != nil {
				return nil, err
			}
		}
		if !waits(req) {
			return handler(ctx, req)
		}
		ctx, c := a.follow(ctx, info.FullMethod, req)
		resp, err := handler(ctx, req)
		return resp, c.end(err)
	}
	return selector.UnaryServerInterceptor(check, closed)
}

// StreamInterceptor authenticates streams (unless TapHandle did),
// authorizes each message a client sends on them, and ends them when a
// reload takes away what let them in; health stays open.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	check := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		enabled := a.Enabled()
		if enabled {
			var err error
			if ctx, err = a.authenticate(ctx); err != nil {
				return err
			}
		}
		ctx, c := a.follow(ctx, info.FullMethod, nil)
		return c.end(handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx, method: info.FullMethod, authorize: enabled, a: a, call: c}))
	}
	return selector.StreamServerInterceptor(check, closed)
}

type authorizedStream struct {
	grpc.ServerStream
	ctx       context.Context
	method    string
	authorize bool // authentication was on when the call began
	a         *Authenticator
	call      *call
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.authorize {
		if err := s.a.authorize(s.ctx, s.method, m); err != nil {
			return err
		}
	}
	s.call.received(m)
	return nil
}
