//go:build linux

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// gone reports whether process pid has exited (a zombie counts as gone:
// it runs nothing).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) < i+3 || s[i+2] == 'Z' || s[i+2] == 'X'
}

// children returns the processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// readPid waits for a child of r to write a pid to path, and kills that
// process when the test ends, should it outlive it.
func readPid(t *testing.T, r *cliRun, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, r, path)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// grandchildren are commands for lockd lock that leave a grandchild
// (sleep) running and write its pid to $D/pid. The grandchild's output
// goes to /dev/null: lockd lock's exit is awaited by its own, not by its
// output's end.
var grandchildren = []struct{ name, body string }{
	{"a grandchild in CMD's process group", `sleep 60 >/dev/null 2>&1 & echo $! > "$D/pid"; wait`},
	{"a grandchild in a session of its own", `setsid sleep 60 >/dev/null 2>&1 & echo $! > "$D/pid"; wait`},
	{"a grandchild whose parent exited", `(sleep 60 >/dev/null 2>&1 & echo $! > "$D/pid"); while :; do sleep 0.05; done`},
}

// TestLockKilledStopsEveryProcessBeforeTheKeyIsFree kills lockd lock with
// SIGKILL while CMD runs a grandchild (in CMD's process group, in a
// session of its own, or orphaned): the key is granted again only once
// that grandchild is gone.
func TestLockKilledStopsEveryProcessBeforeTheKeyIsFree(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	for i, tc := range grandchildren {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"D=" + dir}
			key := "cli/kill9/" + strconv.Itoa(i)
			first := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--ttl=2s", key}, script(tc.body)...)...)
			pid := readPid(t, first, filepath.Join(dir, "pid"))
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			first.exit(t)
			// The next holder looks for the grandchild as soon as it holds
			// the key.
			next := startCLI(t, dir, env, append([]string{"lock", "--addr=" + p.addr, "--wait=1m", key},
				script(`if [ -e /proc/`+strconv.Itoa(pid)+` ] && ! grep -q '^State:.*[ZX]' /proc/`+strconv.Itoa(pid)+`/status; then echo alive; else echo gone; fi > "$D/seen"`)...)...)
			next.wantExit(t, 0)
			if seen, _ := os.ReadFile(filepath.Join(dir, "seen")); strings.TrimSpace(string(seen)) != "gone" {
				t.Fatalf("the next holder of %q found the killed lockd lock's grandchild (pid %d) %s", key, pid, seen)
			}
		})
	}
}

// TestLockGuardianKilled kills the process that supervises CMD for lockd
// lock with SIGKILL: lockd lock stops CMD's remaining processes itself,
// then releases the key and exits 128+9.
func TestLockGuardianKilled(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	lc := lockdv1.NewLockServiceClient(p.dial(t))
	dir := t.TempDir()
	r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + p.addr, "cli/guardian"}, script(grandchildren[0].body)...)...)
	pid := readPid(t, r, filepath.Join(dir, "pid"))
	guards := children(t, r.cmd.Process.Pid)
	if len(guards) != 1 {
		t.Fatalf("lockd lock has %d children, want its guardian alone", len(guards))
	}
	if err := syscall.Kill(guards[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.wantExit(t, 128+9)
	if !gone(pid) {
		t.Fatalf("CMD's grandchild (pid %d) outlived lockd lock", pid)
	}
	res, err := lc.Acquire(context.Background(), &lockdv1.AcquireRequest{Key: "cli/guardian", WaitTimeout: durationpb.New(0)})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("the key after lockd lock exited: %v, %v", res, err)
	}
}

// TestLockStopsWhatTheCommandLeftBehind: CMD exits leaving background
// processes; lockd lock stops them (SIGTERM, then SIGKILL after
// --kill-after for those that ignore it) before it releases the key, and
// exits with CMD's status.
func TestLockStopsWhatTheCommandLeftBehind(t *testing.T) {
	t.Parallel()
	p := startLockd(t, nil)
	for _, tc := range []struct{ name, body string }{
		{"a leftover that stops on SIGTERM", `sleep 60 >/dev/null 2>&1 & echo $! > "$D/pid"; exit 3`},
		{"a leftover that ignores SIGTERM", `trap '' TERM; setsid sleep 60 >/dev/null 2>&1 & echo $! > "$D/pid"; exit 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + p.addr, "--kill-after=300ms", "cli/leftover"}, script(tc.body)...)...)
			r.wantExit(t, 3)
			pid := readPid(t, r, filepath.Join(dir, "pid"))
			if !gone(pid) {
				t.Fatalf("CMD's leftover (pid %d) outlived lockd lock", pid)
			}
		})
	}
}

// fakeLockd is a LockService that grants every Acquire, ends every
// KeepAlive at once with NOT_FOUND (the lease is lost), and counts the
// Releases it gets, which never answer.
type fakeLockd struct {
	lockdv1.UnimplementedLockServiceServer
	releases atomic.Int32
}

func (f *fakeLockd) Acquire(_ context.Context, req *lockdv1.AcquireRequest) (*lockdv1.AcquireResponse, error) {
	ttl := 5 * time.Second
	return &lockdv1.AcquireResponse{Acquired: true, Lease: &lockdv1.Lease{
		Key: req.GetKey(), LeaseId: "fake-lease", Owner: req.GetOwner(), Mode: lockdv1.LockMode_LOCK_MODE_WRITE,
		FencingToken: 1, Ttl: durationpb.New(ttl), ExpireTime: timestamppb.New(time.Now().Add(ttl)), HoldCount: 1,
	}}, nil
}

func (f *fakeLockd) KeepAlive(*lockdv1.KeepAliveRequest, grpc.ServerStreamingServer[lockdv1.KeepAliveResponse]) error {
	return status.Error(codes.NotFound, "lease not held")
}

func (f *fakeLockd) Release(ctx context.Context, _ *lockdv1.ReleaseRequest) (*lockdv1.ReleaseResponse, error) {
	f.releases.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLockLostIsNotReleasedAgain: once lockd reported the lease lost,
// lockd lock stops CMD and exits 76 without trying to release the lease it
// knows is gone (a replica that does not answer would hold it up).
func TestLockLostIsNotReleasedAgain(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeLockd{}
	lockdv1.RegisterLockServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	r := startCLI(t, dir, []string{"D=" + dir}, append([]string{"lock", "--addr=" + lis.Addr().String(), "cli/lost"},
		script(`trap 'exit 0' TERM; while :; do sleep 0.05; done`)...)...)
	r.wantExit(t, 76)
	if n := fake.releases.Load(); n != 0 {
		t.Fatalf("lockd lock sent %d Release calls for a lease lockd had reported lost", n)
	}
}

// TestLockUnreachableSaysSo: with no lockd at --addr, lockd lock --wait 0
// exits 69 naming the address it could not reach, rather than a bare
// "context deadline exceeded".
func TestLockUnreachableSaysSo(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	r := startCLI(t, t.TempDir(), nil, "lock", "--addr="+addr, "--wait=0", "cli/unreachable", "--", "true")
	r.wantExit(t, 69)
	out := r.out.String()
	if !strings.Contains(out, "cannot reach lockd") || !strings.Contains(out, addr) || strings.Contains(out, "context deadline exceeded") {
		t.Fatalf("lockd lock with lockd unreachable said:\n%s", out)
	}
}

// TestLockKeepsItsTokenFromTheCommand: lockd lock authenticates with
// LOCKD_TOKEN (or --token-file) but CMD's environment does not carry it.
func TestLockKeepsItsTokenFromTheCommand(t *testing.T) {
	t.Parallel()
	const token = "jobs-bearer-token-for-cli-0123456789"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lockd.yaml")
	if err := os.WriteFile(cfg, []byte("auth:\n  clients:\n    - {name: jobs, token_env: JOBS_TOKEN, locks: [\"jobs/\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startLockd(t, []string{"JOBS_TOKEN=" + token}, "--config="+cfg)
	r := startCLI(t, dir, []string{"D=" + dir, "LOCKD_TOKEN=" + token}, append([]string{"lock", "--addr=" + p.addr, "jobs/env"},
		script(`env > "$D/env"`)...)...)
	r.wantExit(t, 0)
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), token) || strings.Contains(string(env), "LOCKD_TOKEN=") {
		t.Fatalf("CMD's environment carries lockd lock's bearer token:\n%s", env)
	}
	if !strings.Contains(string(env), "LOCKD_KEY=jobs/env") {
		t.Fatalf("CMD's environment lacks LOCKD_KEY:\n%s", env)
	}
}
