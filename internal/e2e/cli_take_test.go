package e2e

import (
	"strings"
	"testing"
)

// TestTakeExitStatus runs lockd take against a lockd process: 0 while the
// rate allows the cost, 75 (with when, on stderr) once it does not, 0
// again for a call that waits its turn, 75 at once for a turn beyond
// --wait, 1 for a rate other than the one in use, 2 for bad arguments.
func TestTakeExitStatus(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	dir := t.TempDir()
	take := func(args ...string) *cliRun {
		return startCLI(t, dir, nil, append([]string{"take", "--addr=" + p.addr}, args...)...)
	}
	// Flags before or after the key.
	take("cli/take", "--limit", "2", "--period", "1h").wantExit(t, 0)
	take("--limit=2", "--period=1h", "cli/take").wantExit(t, 0)
	refused := take("cli/take", "--limit=2", "--period=1h")
	refused.wantExit(t, 75)
	if !strings.Contains(refused.out.String(), "allowed again in") {
		t.Errorf("a refusal does not say when: %s", refused.out)
	}
	other := take("cli/take", "--limit=3", "--period=1h")
	other.wantExit(t, 1)
	if !strings.Contains(other.out.String(), "2 per 1h0m0s, burst 2") {
		t.Errorf("another rate: the error does not name the rate in use: %s", other.out)
	}

	// A turn every 10s: one waits for it, one beyond --wait is refused.
	take("cli/wait", "--limit=6", "--period=1m", "--burst=1").wantExit(t, 0)
	take("cli/wait", "--limit=6", "--period=1m", "--burst=1", "--wait=1m").wantExit(t, 0)
	take("cli/wait", "--limit=6", "--period=1m", "--burst=1", "--wait=1s").wantExit(t, 75)

	for _, args := range [][]string{
		{"cli/take", "--period=1m"},
		{"cli/take", "--limit=1"},
		{"--limit=1", "--period=1m"},
		{"a", "b", "--limit=1", "--period=1m"},
		{"cli/take", "--limit=1", "--period=1m", "--cost=0"},
		{"cli/take", "--limit=1", "--period=1m", "--wait=-1s"},
	} {
		take(args...).wantExit(t, 2)
	}
	take("-help").wantExit(t, 0)
}
