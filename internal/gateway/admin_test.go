package gateway_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestAdminEndpoints lists, describes and force-releases over HTTP/JSON:
// a client sees its own keys, only the admin may ForceRelease, and an app
// is described without its token.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{auth: true})
	const key = "orders/7 {eu}"
	r := s.call(t, http.MethodPost, "/v1/locks/"+pathOf(key)+":acquire", ordersToken, `{"owner":"worker-7","ttl":"60s"}`).ok(t, "acquire")
	token := r.str("lease", "fencingToken")

	r = s.call(t, http.MethodGet, "/v1/admin/locks?prefix=orders%2F", ordersToken, "").ok(t, "list")
	locks, _ := r.get("locks").([]any)
	if len(locks) != 1 || locks[0].(map[string]any)["key"] != key || r.str("nextPageToken") != "" {
		t.Fatalf("ListLocks: %s", r.raw)
	}
	r = s.call(t, http.MethodGet, "/v1/admin/locks/"+pathOf(key)+":describe", ordersToken, "").ok(t, "describe")
	holders, _ := r.get("lock", "holders").([]any)
	if r.str("lock", "kind") != "LOCK_KIND_LOCK" || len(holders) != 1 || holders[0].(map[string]any)["owner"] != "worker-7" ||
		holders[0].(map[string]any)["fencingToken"] != token || holders[0].(map[string]any)["leaseId"] != nil {
		t.Fatalf("DescribeLock: %s", r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/admin/locks/"+pathOf(key)+":forceRelease", opsToken, `{"owner":"worker-7"}`)
	if code, _ := r.grpcStatus(); r.status != http.StatusForbidden || code != int(codes.PermissionDenied) {
		t.Fatalf("ForceRelease by a client that is no admin: HTTP %d %s", r.status, r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/admin/locks:forceRelease", adminToken, `{"key":`+jsonString(key)+`,"owner":"worker-7"}`).ok(t, "force release")
	if released, _ := r.get("released").([]any); len(released) != 1 {
		t.Fatalf("ForceRelease: %s", r.raw)
	}
	r = s.call(t, http.MethodGet, "/v1/admin/locks:describe?key="+pathOf(key), adminToken, "").ok(t, "describe after")
	if r.str("lock", "kind") != "LOCK_KIND_UNSPECIFIED" || r.get("lock", "holders") != nil && len(r.get("lock", "holders").([]any)) != 0 {
		t.Fatalf("DescribeLock after ForceRelease: %s", r.raw)
	}

	s.call(t, http.MethodGet, "/v1/apps/mp/access_token", ordersToken, "").ok(t, "token")
	r = s.call(t, http.MethodGet, "/v1/admin/apps/mp", ordersToken, "").ok(t, "describe app")
	if r.get("app", "hasToken") != true || r.str("app", "mintsToday") != "1" || r.get("app", "accessToken") != nil {
		t.Fatalf("DescribeApp: %s", r.raw)
	}
	r = s.call(t, http.MethodGet, "/v1/admin/apps/mp", opsToken, "")
	if code, _ := r.grpcStatus(); r.status != http.StatusForbidden || code != int(codes.PermissionDenied) {
		t.Fatalf("DescribeApp of another client's app: HTTP %d %s", r.status, r.raw)
	}
	r = s.call(t, http.MethodGet, "/v1/admin/apps", opsToken, "").ok(t, "list apps")
	if apps, _ := r.get("apps").([]any); len(apps) != 0 {
		t.Fatalf("ListApps of a client without apps: %s", r.raw)
	}
}
