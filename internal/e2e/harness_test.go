package e2e

import (
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

	"github.com/lockd/lockd/internal/testlog"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// lockdBinary builds cmd/lockd once per test binary (with the race detector
// when the tests run with it) and returns its path.
func lockdBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockd-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "lockd")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/lockd/lockd/cmd/lockd")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// process is one running lockd.
type process struct {
	cmd  *exec.Cmd
	addr string
	http string
	logs *testlog.Buffer
	done chan error
}

// startLockd runs lockd with args (plus free --listen and --http-listen
// addresses) and waits until its health check answers SERVING. The process
// is killed at cleanup if it is still running.
func startLockd(t testing.TB, env []string, args ...string) *process {
	t.Helper()
	bin := lockdBinary(t)
	p := &process{addr: freeAddr(t), http: freeAddr(t), logs: &testlog.Buffer{}, done: make(chan error, 1)}
	args = append([]string{"--listen=" + p.addr, "--http-listen=" + p.http}, args...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("lockd %s logs:\n%s", p.addr, p.logs)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.serving() {
			return p
		}
		select {
		case err := <-p.done:
			t.Fatalf("lockd exited: %v\n%s", err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockd did not become SERVING\n%s", p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serving asks /readyz, which answers 200 once Redis answers and the
// server serves (whatever the gRPC listener's TLS).
func (p *process) serving() bool {
	res, err := http.Get("http://" + p.http + "/readyz")
	if err != nil {
		return false
	}
	defer res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// dial returns a client connection to the process, closed at cleanup.
func (p *process) dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// terminate sends SIGTERM and waits for the process to exit.
func (p *process) terminate(t testing.TB) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("lockd did not exit after SIGTERM\n%s", p.logs)
		return nil
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
