package auth_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/config"
)

// tapped runs TapHandle for method with the given authorization header.
func tapped(a *auth.Authenticator, method, header string) (context.Context, error) {
	md := metadata.MD{}
	if header != "" {
		md.Set("authorization", header)
	}
	return a.TapHandle(metadata.NewIncomingContext(context.Background(), md), &tap.Info{FullMethodName: method, Header: md})
}

func TestTapHandleAuthenticatesAndCarriesTheIdentity(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reasons := map[string]int{}
	a, err := auth.New([]auth.Client{
		{Name: "orders", Token: "orders-secret-token", Locks: []string{"orders/"}, Limits: config.Limits{Waiters: 3, KeepAlives: 2, RefreshesPerHour: 5}},
		{Name: "ops", Token: "ops-secret-token", Locks: []string{""}, Admin: true},
	}, auth.OnRefused(func(r string) { mu.Lock(); reasons[r]++; mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := tapped(a, "/lockd.v1.LockService/Acquire", "Bearer orders-secret-token")
	if err != nil {
		t.Fatal(err)
	}
	id, ok := auth.FromContext(ctx)
	// Two clients: what orders did not limit itself is its fair share.
	if want := (auth.Identity{Name: "orders", Limits: config.Limits{Waiters: 3, KeepAlives: 2, RefreshesPerHour: 5}, FairShare: true}); !ok || id != want {
		t.Fatalf("identity %+v %v, want %+v", id, ok, want)
	}
	ctx, _ = tapped(a, "/lockd.v1.LockService/Acquire", "Bearer ops-secret-token")
	if id, _ := auth.FromContext(ctx); !id.Admin {
		t.Fatalf("ops is not admin: %+v", id)
	}
	for header, reason := range map[string]string{"": auth.ReasonMissing, "Basic x": auth.ReasonMissing, "Bearer nope": auth.ReasonUnknown} {
		if _, err := tapped(a, "/lockd.v1.LockService/Acquire", header); status.Code(err) != codes.Unauthenticated {
			t.Errorf("header %q: %v, want UNAUTHENTICATED", header, err)
		}
		mu.Lock()
		n := reasons[reason]
		mu.Unlock()
		if n == 0 {
			t.Errorf("header %q not counted as %s", header, reason)
		}
	}
	// Health stays open, without an identity.
	ctx, err = tapped(a, "/grpc.health.v1.Health/Watch", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := auth.FromContext(ctx); ok {
		t.Fatal("a health call has an identity")
	}
	if _, ok := auth.FromContext(context.Background()); ok {
		t.Fatal("a bare context has an identity")
	}
}

// TestReplaceRotatesTokensLive: after Replace, the new token gets in and
// the old one does not; a list that is not valid changes nothing; an
// empty list turns authentication off.
func TestReplaceRotatesTokensLive(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Client{{Name: "orders", Token: "old-orders-token", Locks: []string{"orders/"}}})
	if err != nil {
		t.Fatal(err)
	}
	method := "/lockd.v1.LockService/Acquire"
	if err := a.Replace([]auth.Client{{Name: "orders", Token: "new-orders-token", Locks: []string{"orders/"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tapped(a, method, "Bearer old-orders-token"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the old token after Replace: %v", err)
	}
	if _, err := tapped(a, method, "Bearer new-orders-token"); err != nil {
		t.Fatalf("the new token after Replace: %v", err)
	}
	if err := a.Replace([]auth.Client{{Name: "a", Token: "t"}, {Name: "b", Token: "t"}}); err == nil || !strings.Contains(err.Error(), "share a token") {
		t.Fatalf("Replace with a shared token: %v", err)
	}
	if _, err := tapped(a, method, "Bearer new-orders-token"); err != nil {
		t.Fatalf("the token in force after a refused Replace: %v", err)
	}
	if err := a.Replace(nil); err != nil || a.Enabled() {
		t.Fatalf("Replace(nil): %v, enabled %v", err, a.Enabled())
	}
	if _, err := tapped(a, method, ""); err != nil {
		t.Fatalf("a call with authentication off: %v", err)
	}
}

// TestMalformedKeysAreInvalidBeforeTheyAreDenied: a key that cannot name a
// lock is INVALID_ARGUMENT, never PERMISSION_DENIED; a refused key is
// quoted short and escaped.
func TestMalformedKeysAreInvalidBeforeTheyAreDenied(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Client{{Name: "orders", Token: "orders-secret-token", Locks: []string{"orders/"}, Apps: []string{"mp"}}})
	if err != nil {
		t.Fatal(err)
	}
	locks, tokens := lockdv1.NewLockServiceClient(serve(t, a)), lockdv1.NewTokenServiceClient(serve(t, a))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer orders-secret-token")
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"an empty key", acquire(locks, "")(ctx), codes.InvalidArgument, "key must not be empty"},
		{"an oversized key outside the prefix", acquire(locks, "billing/"+strings.Repeat("k", 600))(ctx), codes.InvalidArgument, "longer than 512"},
		{"a key with a control character outside the prefix", acquire(locks, "billing/\x01")(ctx), codes.InvalidArgument, "control character"},
		{"an empty app", getToken(tokens, "")(ctx), codes.InvalidArgument, "app must not be empty"},
		{"a key with a bidi override outside the prefix", acquire(locks, "billing/\u202e1")(ctx), codes.PermissionDenied, `may not lock key "billing/\u202e1"`},
		{"a long key outside the prefix", acquire(locks, "billing/"+strings.Repeat("k", 300))(ctx), codes.PermissionDenied, "… (308 bytes)"},
	} {
		st := status.Convert(tc.err)
		if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("%s: %v %q, want %v with %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
}
