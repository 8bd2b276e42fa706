// Package lockdtest builds cmd/lockd and runs it as separate processes, for
// end-to-end tests and benchmarks that treat lockd as production does: a
// binary with flags, reached over loopback gRPC.
package lockdtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lockd/lockd/internal/logtest"
	"github.com/lockd/lockd/internal/porttest"
)

// startTimeout bounds how long a fresh process may take to become ready.
const startTimeout = 30 * time.Second

type build struct {
	once sync.Once
	path string
	err  error
}

// builds holds one build of cmd/lockd per race setting.
var builds = map[bool]*build{false: {}, true: {}}

// Binary builds cmd/lockd once per test binary (with the race detector when
// race is set) and returns its path.
func Binary(tb testing.TB, race bool) string {
	tb.Helper()
	b := builds[race]
	b.once.Do(func() {
		removeStaleBuilds()
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("lockdtest-%d", os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "lockd")
		args := []string{"build", "-o", b.path}
		if race {
			b.path += "-race"
			args = []string{"build", "-o", b.path, "-race"}
		}
		args = append(args, "github.com/lockd/lockd/cmd/lockd")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// removeStaleBuilds removes the binaries built by test processes that have
// exited: each process builds into a directory named after its pid, which
// no exit hook can remove.
func removeStaleBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "lockdtest-*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "lockdtest-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// Options configure [Start].
type Options struct {
	// Race runs a binary built with the race detector.
	Race bool
	// Env is added to the test's own environment.
	Env []string
	// Args follow the free --listen and --http-listen addresses Start
	// picks.
	Args []string
}

// Process is one running lockd.
type Process struct {
	// Cmd is the running command.
	Cmd *exec.Cmd
	// Addr is the gRPC address and HTTP the /metrics, /healthz and
	// /readyz address.
	Addr, HTTP string
	// Logs collects the process's stdout and stderr.
	Logs *logtest.Buffer
	// Done receives the process's exit (Wait's result) once; a test that
	// only looks sends it back for Terminate and cleanup.
	Done chan error

	opts Options
}

// Start runs lockd with o.Args (after free --listen and --http-listen
// addresses) and waits until /readyz answers 200. The process is killed at
// cleanup if it is still running, and its logs are shown if the test
// failed.
func Start(tb testing.TB, o Options) *Process {
	tb.Helper()
	p := &Process{Addr: FreeAddr(tb), HTTP: FreeAddr(tb), Logs: &logtest.Buffer{}, opts: o}
	tb.Cleanup(func() {
		if p.Cmd.ProcessState == nil {
			_ = p.Cmd.Process.Kill()
			<-p.Done
		}
		if tb.Failed() {
			tb.Logf("lockd %s logs:\n%s", p.Addr, p.Logs)
		}
	})
	p.launch(tb)
	return p
}

// launch starts the process and waits until it serves.
func (p *Process) launch(tb testing.TB) {
	tb.Helper()
	bin := Binary(tb, p.opts.Race)
	args := append([]string{"--listen=" + p.Addr, "--http-listen=" + p.HTTP}, p.opts.Args...)
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), p.opts.Env...)
	p.Cmd.Stdout = p.Logs
	p.Cmd.Stderr = p.Logs
	p.Done = make(chan error, 1)
	if err := p.Cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(p.Cmd, p.Done)
	deadline := time.Now().Add(startTimeout)
	for {
		if p.Serving() {
			return
		}
		select {
		case err := <-p.Done:
			p.Done <- err
			tb.Fatalf("lockd exited: %v\n%s", err, p.Logs)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("lockd did not become SERVING\n%s", p.Logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill kills the process with SIGKILL, like a crash, and waits until it is
// gone; its exit stays in Done. It does nothing when the process has
// exited.
func (p *Process) Kill() {
	select {
	case err := <-p.Done:
		p.Done <- err
		return
	default:
	}
	_ = p.Cmd.Process.Kill()
	err := <-p.Done
	p.Done <- err
}

// Restart kills the process (if it runs) and starts it again, with the
// same arguments and addresses, and waits until it serves. Cmd and Done
// then belong to the new process.
func (p *Process) Restart(tb testing.TB) {
	tb.Helper()
	p.Kill()
	p.launch(tb)
}

// Metric returns the sum of the samples of a counter or gauge on /metrics
// (all label sets), or an error when the endpoint does not answer.
func (p *Process) Metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTP+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	var sum float64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// Serving asks /readyz, which answers 200 once Redis answers and the
// server serves (whatever the gRPC listener's TLS).
func (p *Process) Serving() bool {
	res, err := http.Get("http://" + p.HTTP + "/readyz")
	if err != nil {
		return false
	}
	defer res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// Dial returns a client connection to the process, closed at cleanup.
func (p *Process) Dial(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Terminate sends SIGTERM and waits for the process to exit.
func (p *Process) Terminate(tb testing.TB) error {
	tb.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-p.Done:
		return err
	case <-time.After(30 * time.Second):
		tb.Fatalf("lockd did not exit after SIGTERM\n%s", p.Logs)
		return nil
	}
}

// FreeAddr returns a loopback address whose port was free a moment ago
// (see porttest: a process restarted on it finds it free again).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	port, err := porttest.Free()
	if err != nil {
		tb.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
