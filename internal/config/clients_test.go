package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
)

func TestParseReadsClientLimitsAndAdmin(t *testing.T) {
	t.Parallel()
	file := `auth:
  clients:
    - name: orders
      token_env: ORDERS_TOKEN
      locks: ["orders/"]
      limits: {waiters: 100, keepalives: 50, watches: 7, leases: 900, connections: 20, refreshes_per_hour: 6}
      tls_subject: "CN=orders,O=Example"
    - name: ops
      token_file: /run/secrets/billing
      locks: [""]
      admin: true
`
	c, err := config.Parse([]byte(file), sources())
	if err != nil {
		t.Fatal(err)
	}
	orders, ops := c.Auth.Clients[0], c.Auth.Clients[1]
	if want := (config.Limits{Waiters: 100, KeepAlives: 50, Watches: 7, Leases: 900, Connections: 20, RefreshesPerHour: 6}); orders.Limits != want || orders.Admin || orders.TLSSubject != "CN=orders,O=Example" {
		t.Fatalf("orders: limits %+v admin %v", orders.Limits, orders.Admin)
	}
	if ops.Limits != (config.Limits{}) || !ops.Admin || ops.TLSSubject != "" {
		t.Fatalf("ops: limits %+v admin %v", ops.Limits, ops.Admin)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("warnings for a sound file: %q", c.Warnings)
	}
}

func TestParseRefusesBadLimits(t *testing.T) {
	t.Parallel()
	client := func(fields string) string {
		return "auth:\n  clients:\n    - {name: o, token_env: ORDERS_TOKEN, " + fields + "}\n"
	}
	for _, tt := range []struct{ name, file, want string }{
		{"a negative limit", client("limits: {waiters: -1}"), `auth.clients[0] "o": limits: waiters: must be a whole number`},
		{"a limit that is not a number", client("limits: {keepalives: many}"), "keepalives: must be a whole number"},
		{"an unknown limit", client("limits: {streams: 3}"), `limits: unknown field "streams"`},
		{"limits that are not a mapping", client("limits: 3"), "limits: must be a mapping"},
		{"a negative leases limit", client("limits: {leases: -5}"), "leases: must be a whole number"},
		{"an empty tls_subject", client(`tls_subject: ""`), "tls_subject: must not be empty"},
		{"admin that is not a boolean", client("admin: yes please"), "admin: must be true or false"},
	} {
		_, err := config.Parse([]byte(tt.file), sources())
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestParseWarnsAboutPrefixesThatReachAcross: prefixes are matched as
// given, so "billing" covers "billing-ledger/" keys; the file is accepted
// and the overlap reported, as is a prefix without a separator.
func TestParseWarnsAboutPrefixesThatReachAcross(t *testing.T) {
	t.Parallel()
	file := `auth:
  clients:
    - {name: billing, token_env: ORDERS_TOKEN, locks: ["billing"]}
    - {name: ledger, token_file: /run/secrets/billing, locks: ["billing-ledger/"]}
`
	c, err := config.Parse([]byte(file), sources())
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(c.Warnings, "\n")
	for _, want := range []string{
		`auth.clients[0] "billing": locks[0] "billing": does not end with a separator`,
		`covers client "ledger"'s prefix "billing-ledger/", so "billing" may lock "ledger"'s keys`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings\n%s\nlack %q", all, want)
		}
	}
	if len(c.Warnings) != 2 {
		t.Errorf("want 2 warnings, got %q", c.Warnings)
	}
}
