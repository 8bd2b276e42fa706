package gateway

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/internal/safetext"
)

// browserGuard refuses what a web page could make a visitor's browser send
// to the gateway. Browsers send "simple" POSTs (text/plain or form bodies)
// to any origin without asking first, and a gateway without
// authentication would act on them; and a page whose host name an attacker
// re-points at the gateway's address (DNS rebinding) is, to the browser,
// the gateway's own origin, free to read its answers.
//
// So the gateway refuses every request a browser marks as cross-origin
// (Sec-Fetch-Site, or an Origin other than the request's host: Go's
// http.CrossOriginProtection for unsafe methods, the same rule for GET,
// HEAD and OPTIONS), whatever its method and content type: lockd sends no
// CORS headers, so no page of another origin has a use for it. And while
// callers need no token and no TLS certificate names the host, it answers
// only requests addressed to an IP address, to localhost, or to a name it
// was told (Options.Hosts and the listen address's host): names a
// rebinding attacker cannot own.
type browserGuard struct {
	origins *http.CrossOriginProtection
	hosts   map[string]bool // lower case, no trailing dot
	// open reports whether a request needs neither a token nor a
	// certificate: only then does the host matter.
	open func() bool
}

func newBrowserGuard(opts Options) *browserGuard {
	g := &browserGuard{origins: http.NewCrossOriginProtection(), hosts: map[string]bool{}, open: func() bool { return false }}
	for _, h := range opts.Hosts {
		g.hosts[hostName(h)] = true
	}
	if h, _, err := net.SplitHostPort(opts.Listen); err == nil && h != "" {
		g.hosts[hostName(h)] = true
	}
	if opts.TLS == nil {
		authenticated := opts.Authenticated
		if authenticated == nil {
			authenticated = func() bool { return false }
		}
		g.open = func() bool { return !authenticated() }
	}
	return g
}

// wrap refuses what g refuses with 403 and PERMISSION_DENIED, and passes
// the rest to next.
func (g *browserGuard) wrap(next http.Handler, mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var refused error
		if err := g.crossOrigin(r); err != nil {
			refused = status.Errorf(codes.PermissionDenied, "cross-origin browser requests are refused (%v): lockd's gateway is for programs, and a page of the gateway's own origin", err)
		} else if g.open() && !g.allowedHost(r.Host) {
			refused = status.Errorf(codes.PermissionDenied, "host %s is refused: without authentication the gateway answers only requests addressed to an IP address, localhost or a name in --gateway-hosts, so that no web page can reach it through DNS rebinding", safetext.Excerpt(r.Host))
		}
		if refused == nil {
			next.ServeHTTP(w, r)
			return
		}
		// The body, if any, is left unread.
		w.Header().Set("Connection", "close")
		_, m := runtime.MarshalerForRequest(mux, r)
		runtime.HTTPError(r.Context(), mux, m, w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusForbidden, Err: refused})
	})
}

// crossOrigin refuses a request a browser marks as coming from another
// origin, whatever its method: reads too, so that no page of another
// site can make a visitor's browser ask the gateway anything (an access
// token, the state of a lock), even if it cannot read the answer. Unsafe
// methods are checked as http.CrossOriginProtection does; safe ones by
// the same rule: Sec-Fetch-Site other than same-origin or none (a link
// followed, an address typed), or, from older browsers, an Origin other
// than the request's host.
func (g *browserGuard) crossOrigin(r *http.Request) error {
	if err := g.origins.Check(r); err != nil {
		return err
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return nil // checked above
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
		if site != "" {
			return nil
		}
	default:
		return errors.New("Sec-Fetch-Site is " + site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host == r.Host {
		return nil
	}
	return errors.New("the Origin is not the gateway's")
}

// allowedHost reports whether a request addressed to hostport may be
// answered without authentication.
func (g *browserGuard) allowedHost(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without a Host: no browser sends that
	}
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = hostName(h)
	if net.ParseIP(strings.Trim(h, "[]")) != nil {
		return true
	}
	// Browsers resolve localhost and its subdomains to loopback
	// themselves, never through DNS.
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || g.hosts[h]
}

func hostName(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}
