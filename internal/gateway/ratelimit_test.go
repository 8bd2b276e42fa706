package gateway_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestRateLimitEndpoint takes from a rate limiter over HTTP/JSON, with the
// key in the path or, for keys a path cannot carry, in the body, and with
// the lock prefixes of the caller's token.
func TestRateLimitEndpoint(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{auth: true})
	const body = `{"limit":2,"period":"60s"}`
	for want := 1.0; want >= 0; want-- {
		r := s.call(t, http.MethodPost, "/v1/ratelimits/orders/wechat/send:take", ordersToken, body).ok(t, "take")
		if r.get("allowed") != true || r.get("remaining") != want || r.str("resetAfter") == "" {
			t.Fatalf("take with %v left: %s", want, r.raw)
		}
	}
	r := s.call(t, http.MethodPost, "/v1/ratelimits:take", ordersToken, `{"key":"orders/wechat/send","limit":2,"period":"60s"}`).ok(t, "a spent limit")
	if r.get("allowed") != false || r.str("retryAfter") == "" {
		t.Fatalf("third of 2 a minute: %s", r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/ratelimits/orders/wechat/send:take", ordersToken, `{"limit":3,"period":"60s"}`)
	if code, _ := r.grpcStatus(); r.status != http.StatusBadRequest || code != int(codes.FailedPrecondition) {
		t.Fatalf("another limit: HTTP %d %s, want 400 FAILED_PRECONDITION", r.status, r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/ratelimits/billing/api:take", ordersToken, body)
	if code, _ := r.grpcStatus(); r.status != http.StatusForbidden || code != int(codes.PermissionDenied) {
		t.Fatalf("a key outside the token's prefixes: HTTP %d %s, want 403", r.status, r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/ratelimits/orders/x:take", ordersToken, `{"limit":2}`)
	if code, _ := r.grpcStatus(); r.status != http.StatusBadRequest || code != int(codes.InvalidArgument) {
		t.Fatalf("no period: HTTP %d %s, want 400 INVALID_ARGUMENT", r.status, r.raw)
	}
}
