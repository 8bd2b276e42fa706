package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// TestLockPermits runs lockd lock -n: two commands hold permits of a
// semaphore of 2 at once, a third that does not wait exits 75, a different
// limit is refused (2), a permit lost mid-run stops its command (76), and
// the permit of a lockd lock killed outright comes back to a waiting one.
func TestLockPermits(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	env := []string{"D=" + dir}
	holder := func(name string, extra ...string) *cliRun {
		args := append([]string{"lock", "--addr=" + p.addr, "-n", "2"}, extra...)
		args = append(args, "cli/permits")
		return startCLI(t, dir, env, append(args,
			script(`echo "$LOCKD_KEY $LOCKD_LEASE_ID $LOCKD_FENCING_TOKEN" > "$D/`+name+`"; `+spin+`exit 3`)...)...)
	}
	h1, h2 := holder("h1"), holder("h2")
	env1 := strings.Fields(waitFile(t, h1, filepath.Join(dir, "h1")))
	env2 := strings.Fields(waitFile(t, h2, filepath.Join(dir, "h2")))
	if len(env1) != 3 || len(env2) != 3 || env1[0] != "cli/permits" || env1[1] == env2[1] || env1[2] == env2[2] {
		t.Fatalf("the holders' environments: %q and %q", env1, env2)
	}
	// Each permit is a lease of its own, kept alive through LockService.
	if rn, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "cli/permits", LeaseId: env1[1]}); err != nil || rn.GetLease().GetMode() != lockdv1.LockMode_LOCK_MODE_PERMIT {
		t.Fatalf("Renew of a permit: %v, %v", rn, err)
	}

	third := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "-n", "2", "--wait=0", "cli/permits"}, script(`touch "$D/third-ran"`)...)...)
	third.wantExit(t, 75)
	if _, err := os.Stat(filepath.Join(dir, "third-ran")); err == nil || !strings.Contains(third.out.String(), "permits") {
		t.Fatalf("a third holder ran, or exited 75 without a reason:\n%s", third.out)
	}
	other := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "-n", "3", "--wait=0", "cli/permits"}, script("true")...)...)
	other.wantExit(t, 2)
	startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "-n", "2", "--read", "cli/permits"}, script("true")...)...).wantExit(t, 2)

	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h1.wantExit(t, 3)
	h2.wantExit(t, 3)
	if err := os.Remove(filepath.Join(dir, "go")); err != nil {
		t.Fatal(err)
	}

	// A permit lost while its command runs: SIGTERM, exit 76.
	lost := holder("lost", "--kill-after=500ms")
	id := strings.Fields(waitFile(t, lost, filepath.Join(dir, "lost")))[1]
	if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "cli/permits", LeaseId: id}); err != nil {
		t.Fatal(err)
	}
	lost.wantExit(t, 76)

	// A holder killed outright gives its permit back: one waiting gets it.
	only := func(name string) *cliRun {
		return startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "-n", "1", "--wait=1m", "cli/permit-one"},
			script(`echo up > "$D/`+name+`"; `+spin+`true`)...)...)
	}
	crashed := only("crashed")
	waitFile(t, crashed, filepath.Join(dir, "crashed"))
	next := only("next")
	if err := crashed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crashed.wantExit(t, -1) // killed by a signal
	waitFile(t, next, filepath.Join(dir, "next"))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	next.wantExit(t, 0)
}
