// Package etcdtest starts a real single-member etcd server (Debian's
// etcd-server) for benchmarks that compare lockd with etcd's own lock
// service.
//
// The server listens on free 127.0.0.1 ports, keeps its data in a
// temporary directory (fsyncing its log there, as etcd always does) and is
// stopped when the test ends. A missing etcd binary fails the test with a
// hint: `make bench` installs it.
package etcdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
)

const (
	// startTimeout bounds how long a fresh server may take to report
	// itself healthy.
	startTimeout = 30 * time.Second
	// stopTimeout bounds how long it may take to exit after SIGTERM.
	stopTimeout = 15 * time.Second
)

// Server is one etcd process started by [Start].
type Server struct {
	cmd     *exec.Cmd
	client  string // host:port of the gRPC (client) listener
	dataDir string
	logPath string
	done    chan struct{}
	err     error // Wait's result, valid once done is closed
}

// Start runs etcd on free loopback ports with a fresh data directory under
// tb.TempDir() and waits until its /health endpoint answers healthy. The
// server is stopped (SIGTERM, then SIGKILL) when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		tb.Fatal("etcd not found: run `make bench`, which installs etcd-server")
	}
	dir := tb.TempDir()
	s := &Server{dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "etcd.log"), done: make(chan struct{})}
	s.client = lockdtest.FreeAddr(tb)
	peerURL := "http://" + lockdtest.FreeAddr(tb)
	clientURL := "http://" + s.client
	logFile, err := os.Create(s.logPath)
	if err != nil {
		tb.Fatal(err)
	}
	s.cmd = exec.Command(bin,
		"--name", "bench",
		"--data-dir", s.dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL,
		"--initial-cluster-state", "new",
		"--log-level", "warn",
	)
	s.cmd.Stdout = logFile
	s.cmd.Stderr = logFile
	// The server dies with the test binary even if cleanup never runs.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = s.cmd.Start()
	_ = logFile.Close()
	if err != nil {
		tb.Fatalf("etcdtest: exec %s: %v", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	tb.Cleanup(func() {
		if err := s.stop(); err != nil {
			tb.Errorf("etcdtest: cleanup: %v", err)
		}
	})
	if err := s.waitHealthy(); err != nil {
		tb.Fatalf("etcdtest: %v\n--- log tail (%s) ---\n%s", err, s.logPath, s.LogTail())
	}
	return s
}

// Addr is the host:port of etcd's gRPC (client) listener.
func (s *Server) Addr() string { return s.client }

// Pid is the etcd process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// DataDir is the directory etcd writes its log and database to.
func (s *Server) DataDir() string { return s.dataDir }

// LogTail returns the last lines etcd logged.
func (s *Server) LogTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

func (s *Server) waitHealthy() error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("etcd exited during startup (%v)", s.err)
		default:
		}
		if last = s.healthy(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd on %s not healthy within %v: %w", s.client, startTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthy asks /health on the client listener, which answers once the
// member has a leader (itself) and serves.
func (s *Server) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.client+"/health", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
		return err
	}
	if h.Health != "true" {
		return errors.New("health " + strconv.Quote(h.Health))
	}
	return nil
}

func (s *Server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("etcd pid %d did not exit after SIGKILL", s.cmd.Process.Pid)
	}
}
