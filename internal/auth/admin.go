package auth

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/redislock"
)

// The administrative calls (lockd.v1.AdminService). An admin client
// (admin: true) may make every one of them on every key and app; any
// other client may list and describe within its own lock prefixes and
// apps (the handlers narrow listings with Scope), and never ForceRelease.
const (
	adminService = "/lockd.v1.AdminService/"
	// forceRelease is the call only admin clients may make.
	forceRelease = adminService + "ForceRelease"
)

// allowsAdmin checks a request of an AdminService method against c.
func (c *client) allowsAdmin(method string, req any) error {
	if r, ok := req.(interface{ GetKey() string }); ok {
		if err := redislock.ValidateKey(r.GetKey()); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if r, ok := req.(interface{ GetApp() string }); ok {
		if err := validApp(r.GetApp()); err != nil {
			return err
		}
	}
	switch {
	case c.id.Admin:
		return nil
	case method == forceRelease:
		return status.Errorf(codes.PermissionDenied, "client %q may not call ForceRelease: it needs admin: true", c.id.Name)
	case method == adminService+"ListLocks", method == adminService+"ListApps":
		return nil // the handler lists only what the client may see
	}
	// Describing a key or an app follows the client's lists.
	return c.allowsCall(method, req)
}

// Scope is what the caller of ctx may see of locks and apps.
type Scope struct {
	// All is true without authentication and for admin clients: every
	// key and app.
	All bool
	// Admin is true for admin clients.
	Admin bool
	// Locks are the caller's lock prefixes, unless All.
	Locks []string
	// Apps are the caller's apps, unless All.
	Apps map[string]bool
}

// ScopeOf returns what the caller of ctx may see: everything without
// authentication or for an admin client, else its own prefixes and apps.
func ScopeOf(ctx context.Context) Scope {
	c, ok := ctx.Value(clientKey{}).(*client)
	if !ok {
		return Scope{All: true}
	}
	if c.id.Admin {
		return Scope{All: true, Admin: true}
	}
	return Scope{Locks: c.locks, Apps: c.apps}
}

// MayLock reports whether the scope covers key.
func (s Scope) MayLock(key string) bool {
	if s.All {
		return true
	}
	for _, p := range s.Locks {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// MayRead reports whether the scope covers app.
func (s Scope) MayRead(app string) bool {
	return s.All || s.Apps[app]
}

// Narrow returns the prefix a listing of prefix may walk for the scope:
// prefix itself when the scope covers every key under it (or the scope
// may not be narrowed further), else the one scope prefix that extends it.
// Keys outside the scope are still to be left out one by one.
func (s Scope) Narrow(prefix string) string {
	if s.All || s.MayLock(prefix) {
		return prefix
	}
	var under []string
	for _, p := range s.Locks {
		if strings.HasPrefix(p, prefix) {
			under = append(under, p)
		}
	}
	if len(under) == 1 {
		return under[0]
	}
	return prefix
}

// IsAdminToken reports whether an HTTP Authorization header value ("Bearer
// <token>") carries the token of an admin client; true when
// authentication is off.
func (a *Authenticator) IsAdminToken(authorization string) bool {
	set := a.clients.Load()
	if set == nil {
		return true
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return false
	}
	c := set.find(token)
	return c != nil && c.id.Admin
}
