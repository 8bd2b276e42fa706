package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/redistest"
)

// cliRun is one lockd lock (or lockd token) process.
type cliRun struct {
	cmd  *exec.Cmd
	out  *logtest.Buffer
	done chan struct{}
	err  error
}

// startCLI runs the lockd binary with args, in dir, with env added.
func startCLI(t *testing.T, dir string, env []string, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{cmd: exec.Command(lockdBinary(t), args...), out: &logtest.Buffer{}, done: make(chan struct{})}
	r.cmd.Dir = dir
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// exit waits for the process and returns its exit status.
func (r *cliRun) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		t.Fatalf("%v did not exit; output:\n%s", r.cmd.Args, r.out)
	}
	var ee *exec.ExitError
	if r.err != nil && !errors.As(r.err, &ee) {
		t.Fatal(r.err)
	}
	return r.cmd.ProcessState.ExitCode()
}

func (r *cliRun) wantExit(t *testing.T, want int) {
	t.Helper()
	if got := r.exit(t); got != want {
		t.Fatalf("%v exited %d, want %d; output:\n%s", r.cmd.Args[1:], got, want, r.out)
	}
}

// waitFile waits until path exists (written by a child of r) and returns
// its contents.
func waitFile(t *testing.T, r *cliRun, path string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		select {
		case <-r.done:
			t.Fatalf("%v exited before writing %s; output:\n%s", r.cmd.Args[1:], filepath.Base(path), r.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written; output:\n%s", path, r.out)
		}
	}
}

// script is a child command for lockd lock: sh running body, where $D is
// the test's directory.
func script(body string) []string { return []string{"--", "sh", "-c", body} }

// spin keeps a child running (in short sleeps, so traps run) until the
// file go appears.
const spin = `while [ ! -e "$D/go" ]; do sleep 0.05; done; `

func TestLockRunsTheCommandWhileHoldingTheKey(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	env := []string{"D=" + dir}

	r := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--ttl=2s", "cli/env"},
		script(`echo "$LOCKD_KEY $LOCKD_LEASE_ID $LOCKD_FENCING_TOKEN" > "$D/env"; `+spin+`exit 7`)...)...)
	fields := strings.Fields(waitFile(t, r, filepath.Join(dir, "env")))
	if len(fields) != 3 || fields[0] != "cli/env" {
		t.Fatalf("CMD's environment: %q", fields)
	}
	token, err := strconv.ParseUint(fields[2], 10, 64)
	if err != nil || token == 0 {
		t.Fatalf("LOCKD_FENCING_TOKEN %q", fields[2])
	}
	// The lease in CMD's environment is held, and is renewed while CMD
	// runs: a renewal by its id keeps the fencing token.
	rn, err := lc.Renew(ctx, &lockdv1.RenewRequest{Key: "cli/env", LeaseId: fields[1]})
	if err != nil || rn.GetLease().GetFencingToken() != token {
		t.Fatalf("Renew of CMD's lease: %v, %v", rn, err)
	}

	// A second lockd lock that does not wait exits 75, without running
	// its command.
	second := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--wait=0", "cli/env"}, script(`touch "$D/second-ran"`)...)...)
	second.wantExit(t, 75)
	if _, err := os.Stat(filepath.Join(dir, "second-ran")); err == nil {
		t.Fatal("the second lockd lock ran its command without the lock")
	}
	if !strings.Contains(second.out.String(), "not acquired") {
		t.Fatalf("exit 75 without a reason:\n%s", second.out)
	}

	// CMD's exit status is lockd lock's; the lock is released by then.
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.wantExit(t, 7)
	res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "cli/env", Owner: "next"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("key after lockd lock exited: %v, %v", res, err)
	}
	if res.GetLease().GetFencingToken() <= token {
		t.Fatalf("fencing token %d after %d", res.GetLease().GetFencingToken(), token)
	}

	// A key held elsewhere, waited for briefly: 75 as well.
	startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--wait=200ms", "cli/env"}, script("true")...)...).wantExit(t, 75)
}

// TestLockWaitsItsTurn runs two lockd lock on one key: the second waits for
// the first to finish, and their commands never overlap. Two readers run
// at once.
func TestLockWaitsItsTurn(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	dir := t.TempDir()
	env := []string{"D=" + dir}
	job := func(name string) *cliRun {
		return startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "cli/turns"},
			script(`echo start >> "$D/log"; echo `+name+` > "$D/`+name+`"; `+spin+`echo end >> "$D/log"`)...)...)
	}
	first := job("first")
	waitFile(t, first, filepath.Join(dir, "first"))
	second := job("second")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first.wantExit(t, 0)
	second.wantExit(t, 0)
	if log, _ := os.ReadFile(filepath.Join(dir, "log")); string(log) != "start\nend\nstart\nend\n" {
		t.Fatalf("the commands overlapped:\n%s", log)
	}

	// Readers share: each waits for the other to have started.
	reader := func(me, other string) *cliRun {
		return startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--read", "--wait=0", "cli/readers"},
			script(`echo up > "$D/`+me+`"; i=0; while [ ! -e "$D/`+other+`" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done`)...)...)
	}
	r1 := reader("r1", "r2")
	waitFile(t, r1, filepath.Join(dir, "r1"))
	r2 := reader("r2", "r1")
	r1.wantExit(t, 0)
	r2.wantExit(t, 0)
}

// TestLockLostStopsTheCommand loses the lease while CMD runs (released by
// its id behind lockd lock's back): CMD gets SIGTERM at once and lockd lock
// exits 76; a CMD that ignores SIGTERM is killed after --kill-after.
func TestLockLostStopsTheCommand(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, trap string
		want       string
	}{
		// Traps a SIGTERM and stops.
		{"a command that stops on SIGTERM", `trap 'echo TERM > "$D/trapped"; exit 0' TERM`, "TERM\n"},
		// Ignores SIGTERM, in the shell and in its sleeps.
		{"a command that ignores SIGTERM", `trap '' TERM`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			key := "cli/lost/" + tc.name
			args := []string{"lock", "--addr=" + p.addr, "--kill-after=500ms", key}
			body := tc.trap + `; echo "$$ $LOCKD_LEASE_ID" > "$D/id"; while :; do sleep 0.05; done`
			r := startCLI(t, dir, []string{"D=" + dir}, append(args, script(body)...)...)
			fields := strings.Fields(waitFile(t, r, filepath.Join(dir, "id")))
			if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: key, LeaseId: fields[1]}); err != nil {
				t.Fatal(err)
			}
			r.wantExit(t, 76)
			got, _ := os.ReadFile(filepath.Join(dir, "trapped"))
			if string(got) != tc.want {
				t.Fatalf("the command's SIGTERM trap wrote %q, want %q", got, tc.want)
			}
			if tc.want == "" && !strings.Contains(r.out.String(), "SIGKILL") {
				t.Fatalf("no SIGKILL reported:\n%s", r.out)
			}
			pid, _ := strconv.Atoi(fields[0])
			if err := syscall.Kill(pid, 0); err == nil {
				t.Fatalf("the command (pid %d) still runs after lockd lock exited", pid)
			}
		})
	}
}

// TestLockLostWhenRedisFreezes freezes Redis (SIGSTOP) while CMD runs: no
// renewal can be confirmed, so CMD is stopped and lockd lock exits 76.
func TestLockLostWhenRedisFreezes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startLockd(t, nil, "--redis="+srv.Addr())
	dir := t.TempDir()
	r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + p.addr, "--ttl=2s", "cli/frozen"},
		script(`trap 'exit 0' TERM; echo ready > "$D/ready"; while :; do sleep 0.05; done`)...)...)
	waitFile(t, r, filepath.Join(dir, "ready"))
	srv.Freeze()
	code := r.exit(t)
	srv.Thaw()
	if code != 76 {
		t.Fatalf("exit %d, want 76:\n%s", code, r.out)
	}
}

// TestLockForwardsSignals sends SIGTERM and SIGINT to lockd lock: CMD gets
// them, and its exit status is lockd lock's. The lock is released after.
func TestLockForwardsSignals(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		want int
	}{{syscall.SIGTERM, "TERM", 3}, {syscall.SIGINT, "INT", 4}} {
		dir := t.TempDir()
		r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + p.addr, "cli/signals"},
			script(`trap 'echo TERM > "$D/got"; exit 3' TERM; trap 'echo INT > "$D/got"; exit 4' INT; echo up > "$D/ready"; while :; do sleep 0.05; done`)...)...)
		waitFile(t, r, filepath.Join(dir, "ready"))
		if err := r.cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		r.wantExit(t, tc.want)
		if got, _ := os.ReadFile(filepath.Join(dir, "got")); strings.TrimSpace(string(got)) != tc.name {
			t.Fatalf("%v: the command got %q", tc.sig, got)
		}
		res, err := lc.Acquire(ctx, &lockdv1.AcquireRequest{Key: "cli/signals", Owner: "after", Ttl: durationpb.New(time.Second)})
		if err != nil || !res.GetAcquired() {
			t.Fatalf("key after lockd lock exited on %v: %v, %v", tc.sig, res, err)
		}
		if _, err := lc.Release(ctx, &lockdv1.ReleaseRequest{Key: "cli/signals", LeaseId: res.GetLease().GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLockKilledTakesTheCommandAlong kills lockd lock (SIGKILL): its
// command dies with it rather than running on without a lease.
func TestLockKilledTakesTheCommandAlong(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	dir := t.TempDir()
	r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + p.addr, "cli/killed"},
		script(`echo $$ > "$D/pid"; while :; do sleep 0.05; done`)...)...)
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, r, filepath.Join(dir, "pid"))))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // should it outlive the test
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.exit(t)
	for deadline := time.Now().Add(time.Minute); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) outlived lockd lock", pid)
		}
	}
}

func TestLockBadUse(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no --", []string{"cli/bad", "true"}, 2},
		{"no command", []string{"cli/bad", "--"}, 2},
		{"a negative wait", []string{"--wait=-1s", "cli/bad", "--", "true"}, 2},
		{"an invalid key", []string{"bad\tkey", "--", "true"}, 2},
		{"a command that does not exist", []string{"cli/bad", "--", "/no/such/command"}, 127},
		{"lockd unreachable", []string{"--addr=" + freeAddr(t), "--wait=0", "cli/bad", "--", "true"}, 69},
	} {
		r := startCLI(t, dir, nil, append([]string{"lock", "--addr=" + p.addr}, tc.args...)...)
		if got := r.exit(t); got != tc.want {
			t.Errorf("%s: exit %d, want %d:\n%s", tc.name, got, tc.want, r.out)
		}
	}
	// The command that could not run left the key free.
	res, err := lc.Acquire(context.Background(), &lockdv1.AcquireRequest{Key: "cli/bad"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("key after a command that could not run: %v, %v", res, err)
	}
}

// TestLockOnATerminal runs lockd lock on a terminal (a pty from script(1)):
// CMD, in its own process group, gets the terminal's foreground, so it can
// read what is typed, and lockd lock takes the terminal back after.
func TestLockOnATerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("script"); err != nil {
		t.Fatalf("script(1) is needed (Debian package bsdutils): %v", err)
	}
	p := startLockd(t, nil)
	pidFile := filepath.Join(t.TempDir(), "pid")
	line := `sh -c 'echo $$ > ` + pidFile + `; exec ` + lockdBinary(t) + ` lock --addr=` + p.addr + ` cli/tty -- sh -c "read x; echo got:\$x; exit 5"'; echo lockd-exit:$?`
	cmd := exec.Command("script", "-qec", line, "/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &logtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if _, err := io.WriteString(stdin, "hello\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("script: %v\n%s", err, out)
		}
	case <-time.After(time.Minute):
		// Killing lockd lock takes CMD along (parent-death signal).
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("lockd lock on a terminal did not finish:\n%s", out)
	}
	_ = stdin.Close()
	if text := out.String(); !strings.Contains(text, "got:hello") || !strings.Contains(text, "lockd-exit:5") {
		t.Fatalf("on a terminal:\n%s", text)
	}
}
