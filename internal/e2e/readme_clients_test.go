package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/logtest"
)

// TestReadmeHold runs the Hold command of docs/locks.md as written (but for the
// address) until it has streamed a renewal, checks that the key is held,
// then interrupts it as Ctrl-C would: a waiter gets the key at once, long
// before the lease could run out.
func TestReadmeHold(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.ReplaceAll(docBlock(t, "grpcurl-hold", "sh"), "127.0.0.1:50051", p.addr))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &logtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})

	// The lease, then a renewal.
	for strings.Count(out.String(), `"leaseId"`) < 2 {
		select {
		case <-done:
			t.Fatalf("the Hold command ended: %v\n%s", cmd.ProcessState, out)
		case <-ctx.Done():
			t.Fatalf("no renewal streamed:\n%s", out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !strings.Contains(out.String(), `"acquired": true`) {
		t.Fatalf("the Hold command's output:\n%s", out)
	}
	if res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "worker-2"}); err != nil || res.GetAcquired() {
		t.Fatalf("key taken while held: %v, %v", res, err)
	}

	// Ctrl-C: the lease (ttl 10s, just renewed) is released at once, so a
	// waiter bounded well below its ttl gets the key.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "jobs/nightly", Owner: "worker-2", WaitTimeout: durationpb.New(5 * time.Second)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("key after the Hold command was interrupted: %v, %v\n%s", res, err, out)
	}
	<-done
}

// TestReadmeGoClient compiles and runs the README's Go client program as
// written (but for the address).
func TestReadmeGoClient(t *testing.T) {
	t.Parallel()
	runReadmeGo(t, "go-client-example", "step 2 of orders/42, fencing token ")
}

// TestReadmeGoElection compiles and runs the Go program of docs/clients.md
// with an election and a semaphore as written (but for the address).
func TestReadmeGoElection(t *testing.T) {
	t.Parallel()
	runReadmeGo(t, "go-election-example", "leading scheduler, term ", "calling upstream with permit ")
}

// runReadmeGo runs the Go program block named block (see docBlock) against
// a lockd of its own and checks that its output has each of want.
func runReadmeGo(t *testing.T, block string, want ...string) {
	t.Helper()
	p := startLockd(t, nil)
	src := strings.ReplaceAll(docBlock(t, block, "go"), "127.0.0.1:50051", p.addr)
	// Inside the module (testdata is left out of ./...), so it builds
	// against this checkout of the client.
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("testdata", "readme-go-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.RemoveAll(dir)
		_ = os.Remove("testdata") // only when empty
	})
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "run", "./"+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the Go program %s: %v\n%s", block, err, out)
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Fatalf("the Go program %s printed:\n%s", block, out)
		}
	}
}

// TestReadmeLockCommand runs the lockd lock examples of docs/clients.md,
// the lockd lock step of the README's tour and the lockd token example of
// docs/tokens.md as written, with a lockd on PATH that talks to the test's
// lockd (serving the fake WeChat app of the recipe in docs/tokens.md).
func TestReadmeLockCommand(t *testing.T) {
	t.Parallel()
	fake, cfg := readmeApp(t)
	p := startLockd(t, []string{"MP_SECRET=app-secret"}, "--config="+cfg)

	text := runCLIBlock(t, p.addr, "lockd-lock-examples")
	for _, want := range []string{"nightly job holds jobs/nightly with fencing token ", "second copy exited 75", "nightly job done", "export runs with permit "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "never printed") {
		t.Errorf("the second copy ran:\n%s", text)
	}

	if text := runCLIBlock(t, p.addr, "lockd-lock-tour"); !strings.Contains(text, "nightly job holds jobs/nightly with fencing token ") {
		t.Errorf("the tour's lockd lock printed:\n%s", text)
	}

	tmp := t.TempDir()
	runCLIBlockIn(t, p.addr, "lockd-token-example", tmp)
	if tok, err := os.ReadFile(filepath.Join(tmp, "mp.token")); err != nil || !fake.Valid(strings.TrimSpace(string(tok))) {
		t.Errorf("lockd token wrote %q, %v; want the fake's valid token", tok, err)
	}
}

// runCLIBlock runs the sh block named name (see docBlock) with a lockd on
// PATH whose client subcommands talk to addr, and returns its output.
func runCLIBlock(t *testing.T, addr, name string) string {
	t.Helper()
	return runCLIBlockIn(t, addr, name, t.TempDir())
}

// runCLIBlockIn is runCLIBlock with tmp in place of /tmp/.
func runCLIBlockIn(t *testing.T, addr, name, tmp string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	wrapper := "#!/bin/sh\nsub=$1; shift\nexec " + lockdBinary(t) + " \"$sub\" --addr=" + addr + " \"$@\"\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "lockd"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(docBlock(t, name, "sh"), "/tmp/", tmp+"/")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the %s example failed: %v\n%s", name, err, out)
	}
	return string(out)
}
