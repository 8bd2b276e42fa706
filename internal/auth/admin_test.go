package auth

import (
	"testing"
)

func TestScopeNarrow(t *testing.T) {
	t.Parallel()
	s := Scope{Locks: []string{"orders/", "billing/eu/"}}
	for _, tc := range []struct{ prefix, want string }{
		{"orders/42", "orders/42"},  // under a prefix of the scope
		{"orders/", "orders/"},      // the prefix itself
		{"billing/", "billing/eu/"}, // one scope prefix extends it
		{"b", "billing/eu/"},        // likewise
		{"", ""},                    // two extend it: filtered key by key
		{"payments/", "payments/"},  // none: nothing will match
	} {
		if got := s.Narrow(tc.prefix); got != tc.want {
			t.Errorf("Narrow(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	if !(Scope{All: true}).MayLock("anything") || s.MayLock("billing/us/1") || !s.MayLock("billing/eu/1") {
		t.Error("MayLock")
	}
	if (Scope{Apps: map[string]bool{"mp": true}}).MayRead("other") || !(Scope{All: true}).MayRead("other") {
		t.Error("MayRead")
	}
}

func TestIsAdminToken(t *testing.T) {
	t.Parallel()
	a, err := New([]Client{{Name: "ops", Token: "ops-token", Admin: true}, {Name: "orders", Token: "orders-token"}})
	if err != nil {
		t.Fatal(err)
	}
	for authz, want := range map[string]bool{
		"Bearer ops-token": true, "bearer ops-token": true, "Bearer orders-token": false,
		"Bearer nope": false, "": false, "ops-token": false, "Basic ops-token": false,
	} {
		if got := a.IsAdminToken(authz); got != want {
			t.Errorf("IsAdminToken(%q) = %v, want %v", authz, got, want)
		}
	}
	if !Open().IsAdminToken("") {
		t.Error("without authentication every caller may use the admin page")
	}
}
