//go:build unix

package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartAnswersPingWithoutPersistence(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want a loopback address", s.Addr())
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	for k, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		if cfg[k] != want {
			t.Errorf("config %s = %q, want %q", k, cfg[k], want)
		}
	}
}

func TestWithArgsReachesTheServer(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "10mb"))
	got, err := s.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	if got["maxmemory"] != "10485760" {
		t.Errorf("maxmemory = %q, want 10485760", got["maxmemory"])
	}
}

func TestRestartLosesDataAndKeepsTheAddress(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr, pid := s.Addr(), s.Pid()

	s.Restart(t)

	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %q, want %q", s.Addr(), addr)
	}
	if s.Pid() == pid || s.Pid() == 0 {
		t.Errorf("Pid() after Restart = %d, want a new process (was %d)", s.Pid(), pid)
	}
	if processAlive(pid) {
		t.Errorf("old process %d still runs after Restart", pid)
	}
	// The pooled connection died with the old process; go-redis retries.
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil", err)
	}
}

func TestFreezeStopsAnsweringUntilThaw(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	s.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c.Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING answered while frozen")
	}

	s.Thaw()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Thaw: %v", err)
	}
}

func TestStopKillAndRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()

	pid := s.Pid()
	s.Stop()
	if s.Pid() != 0 || processAlive(pid) {
		t.Fatalf("process %d still runs after Stop", pid)
	}
	if _, err := serverPid(s.Addr()); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // a no-op now

	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}

	s.Freeze()
	pid = s.Pid()
	s.Kill() // SIGKILL works on a frozen process too
	if processAlive(pid) {
		t.Fatalf("process %d still runs after Kill", pid)
	}

	s.Freeze() // no-ops while stopped
	s.Thaw()
	s.Restart(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestStopOfAFrozenServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Freeze()
	pid := s.Pid()
	start := time.Now()
	s.Stop()
	if processAlive(pid) {
		t.Fatalf("process %d still runs after Stop", pid)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop of a frozen server took %v; SIGCONT should let SIGTERM act at once", d)
	}
}

func TestCleanupStopsTheProcess(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("server", func(t *testing.T) {
		pid = Start(t).Pid()
	})
	if pid == 0 || processAlive(pid) {
		t.Fatalf("process %d still runs after the test's cleanup", pid)
	}
}

// TestParallelServersGetDistinctPorts starts servers in parallel: no two
// of them running at once share a port (one that has stopped may hand its
// port on).
func TestParallelServersGetDistinctPorts(t *testing.T) {
	t.Parallel()
	const n = 4
	var (
		mu      sync.Mutex
		running = map[string]bool{}
		started int
	)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				s := Start(t)
				if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
					t.Errorf("PING: %v", err)
				}
				mu.Lock()
				if running[s.Addr()] {
					t.Errorf("two running servers listen on %s", s.Addr())
				}
				running[s.Addr()] = true
				started++
				mu.Unlock()
				// Cleanups run last first: this one before the server stops.
				t.Cleanup(func() {
					mu.Lock()
					delete(running, s.Addr())
					mu.Unlock()
				})
			})
		}
	})
	if started != n {
		t.Errorf("%d servers started, want %d", started, n)
	}
}

func TestStartDoesNotMistakeAnotherServerForItsOwn(t *testing.T) {
	t.Parallel()
	other := Start(t)
	s := &Server{bin: binary(t, "redis-server"), dir: t.TempDir(), port: other.Port()}
	s.mu.Lock()
	err := s.launchLocked()
	s.mu.Unlock()
	if err == nil {
		s.Kill()
		t.Fatal("launch on a port another server holds succeeded")
	}
	if !errors.Is(err, errPortInUse) {
		t.Errorf("err = %v, want errPortInUse", err)
	}
}

func TestMissingBinaryFailsWithAHint(t *testing.T) {
	t.Parallel()
	tb := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		binary(tb, "redis-server-that-does-not-exist")
	}()
	<-done
	if !strings.Contains(tb.msg, "redis-server-that-does-not-exist not found: run `make test`, which installs it") {
		t.Errorf("failure message = %q", tb.msg)
	}
}

// fatalRecorder records Fatalf and ends the goroutine like testing does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// TestServerEnvRunsAnotherServer runs Valkey in place of redis-server, as
// `make test-valkey` does, and checks that the server answering is Valkey's.
func TestServerEnvRunsAnotherServer(t *testing.T) {
	t.Setenv(ServerEnv, "valkey-server")
	if got := ServerBinary(); got != "valkey-server" {
		t.Fatalf("ServerBinary() = %q with %s=valkey-server", got, ServerEnv)
	}
	info, err := Start(t).Client(t).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	if name := infoField(info, "server_name"); name != "valkey" {
		t.Errorf("INFO server_name = %q, want valkey:\n%s", name, info)
	}
	t.Setenv(ServerEnv, "")
	if got := ServerBinary(); got != "redis-server" {
		t.Errorf("ServerBinary() = %q with %s unset, want redis-server", got, ServerEnv)
	}
}
