package e2e

import (
	"os/exec"
	"testing"

	"google.golang.org/grpc"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/logtest"
)

// lockdBinary builds cmd/lockd once per test binary (with the race detector
// when the tests run with it) and returns its path.
func lockdBinary(t testing.TB) string {
	t.Helper()
	return lockdtest.Binary(t, raceEnabled)
}

// process is one running lockd.
type process struct {
	proc *lockdtest.Process
	cmd  *exec.Cmd
	addr string
	http string
	logs *logtest.Buffer
	done chan error
}

// startLockd runs lockd with args (plus free --listen and --http-listen
// addresses) and waits until its health check answers SERVING. The process
// is killed at cleanup if it is still running.
func startLockd(t testing.TB, env []string, args ...string) *process {
	t.Helper()
	p := lockdtest.Start(t, lockdtest.Options{Race: raceEnabled, Env: env, Args: args})
	return &process{proc: p, cmd: p.Cmd, addr: p.Addr, http: p.HTTP, logs: p.Logs, done: p.Done}
}

// dial returns a client connection to the process, closed at cleanup.
func (p *process) dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return p.proc.Dial(t)
}

// terminate sends SIGTERM and waits for the process to exit.
func (p *process) terminate(t testing.TB) error {
	t.Helper()
	return p.proc.Terminate(t)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	return lockdtest.FreeAddr(t)
}
