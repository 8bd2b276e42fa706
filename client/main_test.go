package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lockd/lockd/client"
	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// addr is where the lockd the tests and examples talk to listens; TestMain
// points it at a lockd process of its own.
var addr = "127.0.0.1:50051"

// TestMain runs the tests and examples against one lockd process (on its
// embedded store; each test uses keys of its own). The binary is
// $LOCKD_BIN, or else built from the repository around the client.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := lockdBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		return 1
	}
	p, err := startLockd(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		return 1
	}
	addr = p.addr
	code := m.Run()
	if err := p.stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "client tests: lockd:", err)
		code = 1
	}
	return code
}

// lockdBinary returns $LOCKD_BIN, or builds cmd/lockd of the repository the
// client lives in.
func lockdBinary() (string, error) {
	if bin := os.Getenv("LOCKD_BIN"); bin != "" {
		return bin, nil
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(repo, "cmd", "lockd")); err != nil {
		return "", fmt.Errorf("no lockd to test against: set LOCKD_BIN to a lockd binary (%v)", err)
	}
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("lockd-client-test-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/lockd")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/lockd: %v\n%s", err, out)
	}
	return bin, nil
}

// lockdProcess is the lockd the tests run.
type lockdProcess struct {
	cmd   *exec.Cmd
	addr  string
	logs  *syncBuffer
	done  chan error
	built string // the binary, when the tests built it
}

// startLockd runs bin on free loopback ports and waits until it is ready.
func startLockd(bin string) (*lockdProcess, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &lockdProcess{addr: grpcAddr, logs: &syncBuffer{}, done: make(chan error, 1)}
	if os.Getenv("LOCKD_BIN") == "" {
		p.built = bin
	}
	p.cmd = exec.Command(bin, "--listen="+grpcAddr, "--http-listen="+httpAddr)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.done <- p.cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			return nil, fmt.Errorf("lockd exited: %v\n%s", err, p.logs)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = p.stop()
			return nil, fmt.Errorf("lockd did not become ready\n%s", p.logs)
		}
	}
}

// stop ends the process with SIGTERM (SIGKILL if it lingers) and removes a
// binary the tests built.
func (p *lockdProcess) stop() error {
	if p.built != "" {
		defer os.Remove(p.built)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%v\n%s", err, p.logs)
		}
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("lockd did not stop on SIGTERM\n%s", p.logs)
	}
}

func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newClient returns a client of the test's lockd, closed at cleanup.
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New([]string{addr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawConn returns a plain connection to the test's lockd, closed at
// cleanup, for calls behind the client's back.
func rawConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// raw returns a plain LockService stub of the test's lockd.
func raw(t *testing.T) lockdv1.LockServiceClient {
	t.Helper()
	return lockdv1.NewLockServiceClient(rawConn(t))
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// renewals waits until l's expiry has moved on n times, failing the test
// if the lease is lost or ctx ends first.
func renewals(ctx context.Context, t *testing.T, l *client.Lease, n int) {
	t.Helper()
	last := l.ExpireTime()
	for n > 0 {
		select {
		case <-l.Lost():
			t.Fatalf("lease lost with %d renewals to go: %v", n, l.Err())
		case <-ctx.Done():
			t.Fatalf("%d renewals did not come: %v", n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if exp := l.ExpireTime(); exp.After(last) {
			last, n = exp, n-1
		}
	}
}
