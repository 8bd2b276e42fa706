//go:build unix

// Package redistest starts real redis-server processes for tests: a single
// server ([Start]), a Redis Cluster ([StartCluster]) and a master with a
// replica watched by three Sentinels ([StartSentinel]).
//
// Every server listens on a free 127.0.0.1 port, keeps no data on disk and is
// stopped when the test ends. A missing redis-server binary fails the test,
// it never skips it: `make test` installs the binary.
//
// The environment variable REDISTEST_SERVER names another server binary (a
// name looked up in PATH, or a path) to run in place of redis-server, for
// example valkey-server: `make test-valkey` runs the engine's and the token
// broker's suites that way. It starts the Sentinels too (`--sentinel`);
// Clusters are still joined with redis-cli.
//
// The waits are generous (tens of seconds, always with a deadline) so that
// the harness holds up on a loaded two-core machine; a failure names what was
// awaited and shows the tail of the server's log.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/porttest"
)

const (
	// startTimeout bounds how long a freshly spawned server may take to
	// answer PING.
	startTimeout = 30 * time.Second
	// stopTimeout bounds how long a server may take to exit after a signal.
	stopTimeout = 15 * time.Second
	// startAttempts is how often Start picks a new port when the chosen one
	// got taken between picking and binding.
	startAttempts = 5
	// clusterBusOffset is the distance from a cluster node's client port to
	// its cluster bus port.
	clusterBusOffset = 10000
	// maxClusterPort keeps port+clusterBusOffset a valid port.
	maxClusterPort = 65535 - clusterBusOffset
	// logTailLines is how much of a server log a failure message shows.
	logTailLines = 40
)

// errPortInUse reports that a server could not bind its port.
var errPortInUse = errors.New("redistest: port already in use")

// Option configures [Start].
type Option func(*options)

type options struct {
	server   string        // the server binary; default redis-server
	args     []string      // extra command-line arguments
	cluster  bool          // cluster node: reserve port+10000 as well
	sentinel func(*Server) // writes the sentinel config; non-nil = sentinel mode
}

// WithArgs appends redis-server command-line arguments, for example
// WithArgs("--maxmemory", "10mb"). They come after the harness's own
// arguments, so they may override them (except the port and directory).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Valkey starts valkey-server instead of redis-server: the same command
// line, the same protocol.
func Valkey() Option {
	return func(o *options) { o.server = "valkey-server" }
}

// Server is one redis-server process started by [Start]. Its methods are safe
// for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	opts options

	mu          sync.Mutex
	proc        *process // nil while stopped
	incarnation int      // how many processes were launched, for file names
}

// process is one running redis-server.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once Wait returned
	err     error         // Wait's result, valid after done is closed
}

// Start starts a redis-server on a free loopback port, without persistence,
// and waits until it answers PING. The server is killed when the test ends.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.server == "" {
		o.server = ServerBinary()
	}
	s := &Server{bin: binary(tb, o.server), dir: tb.TempDir(), opts: o}
	if o.sentinel != nil {
		o.sentinel(s)
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		s.port, err = reservePort(o.cluster)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s.mu.Lock()
		err = s.launchLocked()
		s.mu.Unlock()
		if err == nil {
			break
		}
		releasePort(s.port, o.cluster)
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: starting %s: %v", s.kind(), err)
	}
	tb.Cleanup(func() {
		if err := s.kill(); err != nil {
			tb.Errorf("redistest: cleanup: %v", err)
		}
		releasePort(s.port, o.cluster)
	})
	return s
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across [Server.Restart].
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Pid returns the process id of the running redis-server, or 0 while it is
// stopped. It changes with [Server.Restart].
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a go-redis client for the server, closed when the test ends.
// It honours context deadlines (ContextTimeoutEnabled), which go-redis does
// not by default.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Restart stops the server (if it runs) and starts a new, empty one on the
// same port with the same arguments: Redis restarting and losing its data.
// A cluster node keeps its cluster configuration and rejoins; a sentinel
// keeps its (rewritten) sentinel configuration.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
	// The port is ours; only a stray outgoing connection can hold it, and
	// only briefly. Keep trying for a while.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launchLocked()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting %s on %s: %v", s.kind(), s.Addr(), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Stop shuts the server down with SIGTERM and waits for it to exit (SIGKILL
// after a timeout). Without persistence its data is gone. It does nothing if
// the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.stopLocked(syscall.SIGTERM)
}

// Kill kills the server with SIGKILL, like a crash, and waits for it to exit.
// It does nothing if the server is not running.
func (s *Server) Kill() {
	_ = s.kill()
}

// Freeze suspends the server with SIGSTOP: connections stay open but nothing
// is answered, like a long GC pause or a partitioned host.
func (s *Server) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Thaw resumes a server suspended by [Server.Freeze] with SIGCONT.
func (s *Server) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Signal(syscall.SIGCONT)
	}
}

func (s *Server) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL)
}

func (s *Server) kind() string {
	if s.opts.sentinel != nil {
		return "redis-sentinel"
	}
	return "redis-server"
}

// argv builds the command line of one incarnation.
func (s *Server) argv() []string {
	var a []string
	if s.opts.sentinel != nil {
		a = append(a, s.sentinelConfPath(), "--sentinel")
	}
	a = append(a,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
	)
	if s.opts.sentinel == nil {
		// A new file name per incarnation guarantees an empty start even if
		// a replica wrote the RDB it received from its master.
		a = append(a,
			"--save", "",
			"--appendonly", "no",
			"--dbfilename", fmt.Sprintf("dump-%d.rdb", s.incarnation),
		)
	}
	if s.opts.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		)
	}
	return append(a, s.opts.args...)
}

// launchLocked spawns a new process and waits until it answers PING.
func (s *Server) launchLocked() error {
	s.incarnation++
	logPath := filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", s.kind(), s.incarnation))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, s.argv()...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = spawn(cmd)
	_ = logFile.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := waitReady(p, s.Addr()); err != nil {
		_ = p.signalAndWait(syscall.SIGKILL)
		tail := logTail(logPath)
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%w: %s\n%s", errPortInUse, s.Addr(), tail)
		}
		return fmt.Errorf("%s on %s: %w\n--- log tail (%s) ---\n%s", s.kind(), s.Addr(), err, logPath, tail)
	}
	s.proc = p
	return nil
}

// stopLocked sends sig to the running process and waits for it to exit,
// falling back to SIGKILL.
func (s *Server) stopLocked(sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	return p.signalAndWait(sig)
}

func (p *process) signalAndWait(sig syscall.Signal) error {
	_ = p.cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		// A frozen process acts on the signal only once it runs again.
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, 2*stopTimeout)
	}
}

// waitReady waits until the process answers on addr, or exits, or
// startTimeout passes. It checks the process id in the answer: another
// process that holds the port must not pass for ours.
func waitReady(p *process, addr string) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited during startup (%v)", p.err)
		default:
		}
		pid, err := serverPid(addr)
		if err == nil && pid != p.cmd.Process.Pid {
			err = fmt.Errorf("%s is served by pid %d, not by ours (%d)", addr, pid, p.cmd.Process.Pid)
		}
		if err == nil {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %w", startTimeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serverPid asks the server at addr for its process id with INFO server,
// over a fresh connection and without go-redis's retries.
func serverPid(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	head = strings.TrimSpace(head)
	n, err := strconv.Atoi(strings.TrimPrefix(head, "$"))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("INFO answered %q", head) // e.g. -LOADING
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(infoField(string(body), "process_id"))
	if err != nil {
		return 0, fmt.Errorf("INFO server without process_id: %w", err)
	}
	return pid, nil
}

// logTail returns the last lines of a log file.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// LogTail returns the last lines of the current (or last) process's log, for
// failure messages in tests that use the server.
func (s *Server) LogTail() string {
	s.mu.Lock()
	n := s.incarnation
	s.mu.Unlock()
	return logTail(filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", s.kind(), n)))
}

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{} // ports (and bus ports) of this process's servers
)

// reservePort returns a loopback port that was free a moment ago and that no
// other server of this process uses. With bus, port+10000 (the cluster bus)
// is checked and reserved as well.
func reservePort(bus bool) (int, error) {
	for range 200 {
		port, err := probePort(bus)
		if err != nil {
			continue
		}
		portMu.Lock()
		taken := portsUsed[port] || bus && portsUsed[port+clusterBusOffset]
		if !taken {
			portsUsed[port] = true
			if bus {
				portsUsed[port+clusterBusOffset] = true
			}
		}
		portMu.Unlock()
		if !taken {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port found")
}

// probePort returns a loopback port that is free now (see porttest).
func probePort(bus bool) (int, error) {
	port, err := porttest.Free()
	if err != nil {
		return 0, err
	}
	if bus {
		if port >= maxClusterPort {
			return 0, errors.New("port too high for a cluster bus")
		}
		lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusOffset)))
		if err != nil {
			return 0, err
		}
		_ = lb.Close()
	}
	return port, nil
}

func releasePort(port int, bus bool) {
	portMu.Lock()
	defer portMu.Unlock()
	delete(portsUsed, port)
	if bus {
		delete(portsUsed, port+clusterBusOffset)
	}
}

// spawnRequests feeds the spawner goroutine.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

// spawn starts cmd from one OS thread that lives as long as the test binary.
// On Linux the children get SIGKILL when their parent thread dies
// (Pdeathsig), so servers do not outlive a test binary that panicked or
// timed out; a thread that lives for the whole process makes that signal
// mean "the test binary died" and nothing else.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not exit
			for r := range spawnRequests {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	r := spawnRequest{cmd: cmd, errc: make(chan error, 1)}
	spawnRequests <- r
	return <-r.errc
}

// command runs one command against addr with a short-lived client.
func command(ctx context.Context, addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
		WriteTimeout:          5 * time.Second,
		PoolSize:              1,
		DisableIdentity:       true,
		Protocol:              2,
	})
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// infoField returns one "name:value" field of an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// waitFor polls check until it returns nil or timeout passes, and then
// fails the test with what and the last error.
func waitFor(tb testing.TB, timeout time.Duration, what string, check func(ctx context.Context) error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: %s: not reached within %v: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ScriptCalls returns how many scripts (EVAL and EVALSHA) the server behind
// c has run, from INFO commandstats: for tests that count Redis round trips.
func ScriptCalls(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	calls := CommandCalls(tb, c)
	return calls["eval"] + calls["evalsha"]
}

// CommandCalls returns how many times the server behind c has run each
// command, from INFO commandstats, by lower-case name ("evalsha",
// "publish"; subcommands as "client|setinfo").
func CommandCalls(tb testing.TB, c *redis.Client) map[string]int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls
}
