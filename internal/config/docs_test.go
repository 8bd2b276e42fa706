package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/config"
)

// TestMultiTeamExampleParses: the example of docs/multi-team.md is a valid
// configuration, with the limits it says.
func TestMultiTeamExampleParses(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/multi-team.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- multi-team-config")
	if !ok {
		t.Fatal("docs/multi-team.md has no multi-team-config block")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the multi-team-config block does not end")
	}
	src := config.Sources{ReadFile: func(p string) ([]byte, error) { return []byte(strings.Repeat("t", 20) + p[len(p)-8:]), nil }}
	c, err := config.Parse([]byte(block), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Auth.Clients) != 3 {
		t.Fatalf("%d clients, want 3", len(c.Auth.Clients))
	}
	billing := c.Auth.Clients[1]
	if want := (config.Limits{Waiters: 8000, KeepAlives: 15000, Watches: 100, Leases: 50000, Connections: 600, RefreshesPerHour: 10}); billing.Limits != want {
		t.Errorf("billing's limits %+v, want %+v", billing.Limits, want)
	}
	if ops := c.Auth.Clients[2]; ops.TLSSubject != "CN=ops,O=Example" || !ops.Admin {
		t.Errorf("ops: %+v", ops)
	}
}
