package adminui_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/adminui"
)

// fakeAdmin answers ListApps with the authorization it was given, and
// refuses ForceRelease as lockd refuses a non-admin client.
type fakeAdmin struct {
	lockdv1.AdminServiceClient
}

func (fakeAdmin) ListApps(ctx context.Context, _ *lockdv1.ListAppsRequest, _ ...grpc.CallOption) (*lockdv1.ListAppsResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	return &lockdv1.ListAppsResponse{Apps: []*lockdv1.AppInfo{{App: strings.Join(md.Get("authorization"), ",")}}}, nil
}

func (fakeAdmin) ForceRelease(context.Context, *lockdv1.ForceReleaseRequest, ...grpc.CallOption) (*lockdv1.ForceReleaseResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "denied by lockd")
}

// TestGuard: the page's calls need its header, its own origin, an admin
// token with authentication on (passed on to lockd as authorization), and
// an IP address or known host without it; lockd's refusals keep their
// HTTP status.
func TestGuard(t *testing.T) {
	t.Parallel()
	auth := true
	h := adminui.Handler(adminui.Options{Admin: fakeAdmin{}, Authenticated: func() bool { return auth },
		IsAdmin: func(a string) bool { return a == "Bearer admin" }, Hosts: []string{"lockd.internal"}})
	for _, tc := range []struct {
		name, method, path, host, authz string
		header                          map[string]string
		noAuth                          bool
		want                            int
		body                            string
	}{
		{name: "the page", method: "GET", path: "/ui/", want: 200, body: "<title>lockd admin</title>"},
		{name: "its script", method: "GET", path: "/ui/app.js", want: 200, body: "X-Lockd-Ui"},
		{name: "no header", method: "GET", path: "/ui/api/apps", authz: "Bearer admin", want: 403},
		{name: "no token", method: "GET", path: "/ui/api/apps", header: map[string]string{"X-Lockd-Ui": "1"}, want: 401},
		{name: "another client's token", method: "GET", path: "/ui/api/apps", authz: "Bearer orders", header: map[string]string{"X-Lockd-Ui": "1"}, want: 403},
		{name: "a cross-site call", method: "GET", path: "/ui/api/apps", authz: "Bearer admin", header: map[string]string{"X-Lockd-Ui": "1", "Sec-Fetch-Site": "cross-site"}, want: 403},
		{name: "the admin token", method: "GET", path: "/ui/api/apps", authz: "Bearer admin", header: map[string]string{"X-Lockd-Ui": "1"}, want: 200, body: `"app":"Bearer admin"`},
		{name: "lockd's refusal", method: "POST", path: "/ui/api/force-release", authz: "Bearer admin", header: map[string]string{"X-Lockd-Ui": "1"}, want: 403, body: "denied by lockd"},
		{name: "a bad body", method: "POST", path: "/ui/api/force-release", authz: "Bearer admin", header: map[string]string{"X-Lockd-Ui": "1"}, want: 400},
		{name: "no auth, an IP address", method: "GET", path: "/ui/api/apps", host: "127.0.0.1:9090", noAuth: true, header: map[string]string{"X-Lockd-Ui": "1"}, want: 200},
		{name: "no auth, a known host", method: "GET", path: "/ui/api/apps", host: "lockd.internal:9090", noAuth: true, header: map[string]string{"X-Lockd-Ui": "1"}, want: 200},
		{name: "no auth, another host", method: "GET", path: "/ui/api/apps", host: "evil.example:9090", noAuth: true, header: map[string]string{"X-Lockd-Ui": "1"}, want: 403},
	} {
		auth = !tc.noAuth
		body := strings.NewReader(`{"key":"k","owner":"o"}`)
		if tc.name == "a bad body" {
			body = strings.NewReader(`{"key":`)
		}
		r := httptest.NewRequest(tc.method, tc.path, body)
		if tc.host != "" {
			r.Host = tc.host
		}
		if tc.authz != "" {
			r.Header.Set("Authorization", tc.authz)
		}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s: HTTP %d %s, want %d with %q", tc.name, w.Code, w.Body, tc.want, tc.body)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", tc.name, csp)
		}
	}
}
