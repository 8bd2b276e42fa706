package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/redistest"
)

// holdScript writes the shell script of docs/http-hold.md to a file.
func holdScript(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hold.sh")
	if err := os.WriteFile(path, []byte(docBlock(t, "hold-script", "sh")), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHoldScriptOfTheDocs runs the script of docs/http-hold.md against a
// lockd with its HTTP gateway: a job that finishes releases the lock and
// keeps its exit status; a job whose lease an admin takes away is stopped,
// and the script exits 76 naming the NOT_FOUND status the stream ended
// with; a busy key exits 75.
func TestHoldScriptOfTheDocs(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: run `make test`, which installs it")
	}
	script := holdScript(t)
	srv := redistest.Start(t)
	gateway := freeAddr(t)
	p := startLockd(t, nil, "--redis="+srv.Addr(), "--gateway-listen="+gateway)
	conn := p.dial(t)
	locks, admin := lockdv1.NewLockServiceClient(conn), lockdv1.NewAdminServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	run := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, "sh", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "LOCKD_GATEWAY=http://"+gateway)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	exitCode := func(cmd *exec.Cmd, out *bytes.Buffer) int {
		err := cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("hold.sh: %v\n%s", err, out)
		}
		return cmd.ProcessState.ExitCode()
	}
	free := func() bool {
		r, err := locks.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "probe"})
		if err != nil || !r.GetAcquired() {
			return false
		}
		_, err = locks.Release(ctx, &lockdv1.ReleaseRequest{Key: "jobs/nightly", LeaseId: r.GetLease().GetLeaseId()})
		return err == nil
	}

	// A job that finishes: its status, and the lock released.
	marker := filepath.Join(t.TempDir(), "ran")
	cmd, out := run("sh", "-c", "touch "+marker+"; exit 3")
	if code := exitCode(cmd, out); code != 3 {
		t.Fatalf("hold.sh of a job exiting 3 = %d\n%s", code, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the job did not run: %v\n%s", err, out)
	}
	until(ctx, t, "the lock is released when the job ends", free)

	// A job under a lease taken away: stopped, exit 76, the status named.
	cmd, out = run("sleep", "600")
	until(ctx, t, "the job holds the lock", func() bool {
		d, err := admin.DescribeLock(ctx, &lockdv1.DescribeLockRequest{Key: "jobs/nightly"})
		return err == nil && len(d.GetLock().GetHolders()) == 1
	})
	busy, busyOut := run("true")
	if code := exitCode(busy, busyOut); code != 75 || !strings.Contains(busyOut.String(), `"acquired":false`) {
		t.Fatalf("hold.sh of a busy key = %d, want 75 and the refusal\n%s", code, busyOut)
	}
	if _, err := admin.ForceRelease(ctx, &lockdv1.ForceReleaseRequest{Key: "jobs/nightly"}); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(cmd, out); code != 76 || !strings.Contains(out.String(), `hold ended: {"error":{"code":5,`) {
		t.Fatalf("hold.sh of a lost lease = %d, want 76 and the NOT_FOUND line\n%s", code, out)
	}
}

// until polls ok until it holds, failing the test when ctx ends first.
func until(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		if ctx.Err() != nil {
			t.Fatalf("%s: not seen in time", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
