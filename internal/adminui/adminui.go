// Package adminui serves lockd's admin page, /ui on --http-listen: the
// locks held by prefix with their holders and waiting writers, elections
// with their leaders and terms, semaphores with their permits in use, and
// the apps' token state, refreshed by itself, with ForceRelease behind a
// confirmation. Everything it needs is embedded in the binary.
//
// The page calls lockd's AdminService through the same gRPC server as any
// client (the caller's bearer token passed on as its authorization), so
// the service's own rules decide what the page may see and do. With
// authentication on, the page asks for an admin client's token, which it
// keeps in the browser tab's session storage and sends only in the
// Authorization header of its calls, never in a URL.
package adminui

import (
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

//go:embed assets
var assets embed.FS

// Options configure Handler.
type Options struct {
	// Admin is the AdminService of the lockd serving the page, reached
	// through its gRPC server so its interceptors (authentication,
	// validation, limits) apply.
	Admin lockdv1.AdminServiceClient
	// Authenticated reports whether lockd requires bearer tokens; nil
	// means it does not.
	Authenticated func() bool
	// IsAdmin reports whether an Authorization header value carries an
	// admin client's token. With authentication on, the page's calls need
	// one.
	IsAdmin func(authorization string) bool
	// Hosts are host names, besides IP addresses and localhost, that the
	// page answers to while authentication is off (so no web page reaches
	// it by DNS rebinding).
	Hosts []string
}

// Header is the request header every call of the page carries: a web page
// of another origin cannot send it without a CORS preflight, which lockd
// never grants.
const Header = "X-Lockd-Ui"

// pageSize is how many keys one refresh of the page lists at most per call.
const pageSize = 200

// maxPages bounds the ListLocks calls of one refresh: one screen of the
// page shows up to pageSize × maxPages keys, and the page moves between
// screens.
const maxPages = 10

// Handler returns the handler of /ui and /ui/.
func Handler(opts Options) http.Handler {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /ui/", http.StripPrefix("/ui", files))
	api := &api{opts: opts}
	mux.HandleFunc("GET /ui/api/locks", api.guard(api.locks))
	mux.HandleFunc("GET /ui/api/apps", api.guard(api.apps))
	mux.HandleFunc("POST /ui/api/force-release", api.guard(api.forceRelease))
	return secure(mux)
}

// secure sets headers that keep the page from being framed or fed foreign
// scripts.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

type api struct{ opts Options }

func (a *api) authenticated() bool { return a.opts.Authenticated != nil && a.opts.Authenticated() }

// guard admits a call of the page: it carries Header, comes from the
// page's own origin, and, with authentication on, an admin client's
// token; without authentication, it is addressed to an IP address,
// localhost or one of Hosts.
func (a *api) guard(next func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(Header) != "1" {
			writeError(w, http.StatusForbidden, "calls of the admin page carry the "+Header+" header")
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			writeError(w, http.StatusForbidden, "cross-site call refused")
			return
		}
		if !a.authenticated() {
			if !a.knownHost(r.Host) {
				writeError(w, http.StatusForbidden, "without authentication the admin page answers only to IP addresses, localhost and --gateway-host names")
				return
			}
		} else {
			authz := r.Header.Get("Authorization")
			switch {
			case authz == "":
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockd"`)
				writeError(w, http.StatusUnauthorized, "enter an admin client's bearer token")
				return
			case a.opts.IsAdmin == nil || !a.opts.IsAdmin(authz):
				writeError(w, http.StatusForbidden, "the admin page needs the token of a client with admin: true")
				return
			}
		}
		next(w, r)
	}
}

func (a *api) knownHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, h := range a.opts.Hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// outgoing passes the caller's Authorization on to lockd.
func outgoing(r *http.Request) *http.Request {
	ctx := r.Context()
	if authz := r.Header.Get("Authorization"); authz != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authz)
	}
	return r.WithContext(ctx)
}

// locks answers one screen of the keys under ?prefix=: up to maxPages of
// ListLocks's pages from ?page_token= (the start when empty), and "next",
// the page token of the following screen ("" when there is none).
func (a *api) locks(w http.ResponseWriter, r *http.Request) {
	r = outgoing(r)
	prefix := r.URL.Query().Get("prefix")
	token := r.URL.Query().Get("page_token")
	all := []json.RawMessage{}
	for range maxPages {
		res, err := a.opts.Admin.ListLocks(r.Context(), &lockdv1.ListLocksRequest{Prefix: prefix, PageSize: pageSize, PageToken: token})
		if err != nil {
			writeStatus(w, err)
			return
		}
		for _, l := range res.GetLocks() {
			all = append(all, marshal(l))
		}
		if token = res.GetNextPageToken(); token == "" {
			break
		}
	}
	writeJSON(w, map[string]any{"locks": all, "next": token})
}

func (a *api) apps(w http.ResponseWriter, r *http.Request) {
	r = outgoing(r)
	res, err := a.opts.Admin.ListApps(r.Context(), &lockdv1.ListAppsRequest{})
	if err != nil {
		writeStatus(w, err)
		return
	}
	_, _ = w.Write(marshal(res))
}

func (a *api) forceRelease(w http.ResponseWriter, r *http.Request) {
	r = outgoing(r)
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req := &lockdv1.ForceReleaseRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	res, err := a.opts.Admin.ForceRelease(r.Context(), req)
	if err != nil {
		writeStatus(w, err)
		return
	}
	_, _ = w.Write(marshal(res))
}

func marshal(m proto.Message) []byte {
	b, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	return b
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"message": msg})
}

// writeStatus answers a gRPC error with the HTTP status the gateway gives
// its code, and its message.
func writeStatus(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	if st.Code() == codes.OK {
		st = status.New(codes.Internal, "internal error")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	_ = json.NewEncoder(w).Encode(map[string]any{"code": int(st.Code()), "message": st.Message()})
}
