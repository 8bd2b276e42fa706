package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockd/lockd/client"
)

// Exit statuses of lockd lock besides CMD's own (sysexits.h where one fits).
const (
	exitUsage       = 2   // bad flags or arguments
	exitUnavailable = 69  // lockd could not be reached, or refused the call
	exitNotAcquired = 75  // the lock was not acquired in time (EX_TEMPFAIL)
	exitLost        = 76  // the lease was lost while CMD ran
	exitCannotRun   = 126 // CMD could not be started
	exitNotFound    = 127 // CMD was not found
	exitSignal      = 128 // + the signal's number, as shells report a signal
)

const lockUsage = "usage: lockd lock [flags] [-n N] KEY -- CMD [ARGS...]"

// acquireMargin is how long beyond --wait lockd lock waits for replicas
// that take the call but do not answer before it gives up.
const acquireMargin = 10 * time.Second

// lockFlags are lockd lock's flags and arguments.
type lockFlags struct {
	client    clientFlags
	ttl       time.Duration
	wait      time.Duration
	read      bool
	permits   int // > 0: a permit of the semaphore KEY of this limit
	owner     string
	killAfter time.Duration
	key       string
	argv      []string
}

func parseLockFlags(args []string, stderr io.Writer) (*lockFlags, error) {
	f := &lockFlags{}
	fs := newClientFlagSet("lockd lock", lockUsage, "Runs CMD while holding the lock KEY; docs/clients.md lists its exit statuses.", stderr)
	f.client.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 0, "lease ttl, renewed about every ttl/3 while CMD runs; 0 = lockd's default (30s)")
	fs.DurationVar(&f.wait, "wait", 30*time.Second, "how long to wait for the lock; 0 tries once")
	fs.BoolVar(&f.read, "read", false, "take a shared (read) lock instead of an exclusive one")
	fs.IntVar(&f.permits, "n", 0, "take one of N permits of the semaphore KEY instead of the lock (at most N holders at once)")
	fs.StringVar(&f.owner, "owner", "", "owner name; the same owner re-enters its lease (default: unique to this run)")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after SIGTERM to CMD's processes (the lease lost, or left running by CMD), SIGKILL them this much later")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	switch {
	case len(rest) < 3 || rest[1] != "--":
		return nil, errors.New(lockUsage)
	case f.wait < 0 || f.ttl < 0 || f.killAfter < 0:
		return nil, errors.New("--wait, --ttl and --kill-after must not be negative")
	case f.permits < 0 || f.permits > math.MaxUint32:
		return nil, fmt.Errorf("-n must lie in [1, %d]", uint32(math.MaxUint32))
	case f.permits > 0 && f.read:
		return nil, errors.New("-n and --read do not go together: a permit is neither read nor write")
	}
	f.key, f.argv = rest[0], rest[2:]
	return f, nil
}

// runLock is lockd lock: it takes the lock, runs CMD while the lease is
// kept alive, passes signals on to CMD, and stops CMD if the lease is lost.
func runLock(args []string, getenv func(string) string, _, stderr io.Writer) int {
	f, err := parseLockFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "lockd lock:", err)
		return exitUsage
	}
	c, err := f.client.dial(getenv, client.WithRetryFor(unreachableFor(f.wait)))
	if err != nil {
		fmt.Fprintln(stderr, "lockd lock:", err)
		return exitUsage
	}

	// Signals are caught from the start: while waiting for the lock they
	// end the wait; while CMD runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	lease, code := f.acquire(c, sigs, stderr)
	if lease == nil {
		// A call whose outcome was unknown is undone in the background;
		// lockd lock does not linger for it (a grant nobody keeps alive
		// runs out at its ttl).
		closeWithin(c, closeBound)
		return code
	}
	code = f.run(lease, sigs, stderr)
	_ = c.Close() // the lease is released or known lost by now: nothing to wait for
	return code
}

// unreachableFor is how long lockd lock keeps trying replicas that cannot
// be reached: as long as --wait, at least 2s and at most 10s.
func unreachableFor(wait time.Duration) time.Duration {
	return min(max(wait, 2*time.Second), 10*time.Second)
}

// closeBound bounds how long lockd lock waits, when it got no lease, for
// the client to close: for the undo of a call whose outcome is unknown,
// which takes a moment when lockd answers, and cannot succeed when it
// cannot be reached.
const closeBound = 500 * time.Millisecond

// closeWithin closes c, waiting at most d for it.
func closeWithin(c *client.Client, d time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Close()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// acquire waits for the lock; without it, it returns the exit status.
func (f *lockFlags) acquire(c *client.Client, sigs <-chan os.Signal, stderr io.Writer) (*client.Lease, int) {
	// The owner is named here, not made up by the client, so that the
	// lease is not released when lockd lock's connection closes: killed
	// uncleanly, lockd lock leaves its lease to run out while its guardian
	// stops CMD's processes (see startChild).
	owner := f.owner
	if owner == "" {
		owner = uniqueOwner()
	}
	opts := []client.AcquireOption{client.WithWait(f.wait), client.WithOwner(owner)}
	if f.ttl > 0 {
		opts = append(opts, client.WithTTL(f.ttl))
	}
	// The wait is bounded, and so is the time spent on replicas that do
	// not answer. The bound is a timer, not a deadline: without a deadline
	// the client gives up on replicas it cannot reach after
	// unreachableFor, and answers why.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	bound := time.AfterFunc(f.wait+acquireMargin, func() { cancel(errNoAnswer) })
	defer bound.Stop()
	type result struct {
		lease *client.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		var (
			l   *client.Lease
			err error
		)
		switch {
		case f.permits > 0:
			l, err = c.AcquirePermit(ctx, f.key, f.permits, opts...)
		case f.read:
			l, err = c.AcquireRead(ctx, f.key, opts...)
		default:
			l, err = c.Acquire(ctx, f.key, opts...)
		}
		got <- result{l, err}
	}()
	var res result
	select {
	case res = <-got:
	case sig := <-sigs:
		cancel(nil)
		if res = <-got; res.lease != nil {
			_ = res.lease.Release(context.Background())
		}
		fmt.Fprintf(stderr, "lockd lock: %v while waiting for %q\n", sig, f.key)
		return nil, exitSignal + signalNumber(sig)
	}
	var busy *client.LockedError
	switch {
	case errors.As(res.err, &busy) && f.permits > 0:
		fmt.Fprintf(stderr, "lockd lock: all %d permits of %q are held (the first for another %v); none acquired within %v\n",
			f.permits, f.key, busy.RetryAfter.Round(time.Millisecond), f.wait)
		return nil, exitNotAcquired
	case errors.As(res.err, &busy):
		fmt.Fprintf(stderr, "lockd lock: %q is held by another owner (for another %v); not acquired within %v\n",
			f.key, busy.RetryAfter.Round(time.Millisecond), f.wait)
		return nil, exitNotAcquired
	case status.Code(res.err) == codes.InvalidArgument, status.Code(res.err) == codes.FailedPrecondition && f.permits > 0:
		fmt.Fprintln(stderr, "lockd lock:", status.Convert(res.err).Message())
		return nil, exitUsage
	case status.Code(res.err) == codes.Unavailable:
		fmt.Fprintf(stderr, "lockd lock: cannot reach lockd at %s (tried for %v): %s\n", f.client.addr, unreachableFor(f.wait), status.Convert(res.err).Message())
		return nil, exitUnavailable
	case errors.Is(context.Cause(ctx), errNoAnswer):
		fmt.Fprintf(stderr, "lockd lock: cannot reach lockd at %s: no answer within %v\n", f.client.addr, f.wait+acquireMargin)
		return nil, exitUnavailable
	case res.err != nil:
		fmt.Fprintln(stderr, "lockd lock:", res.err)
		return nil, exitUnavailable
	}
	return res.lease, 0
}

// errNoAnswer ends an Acquire that lockd took but did not answer in time.
var errNoAnswer = errors.New("no answer")

// uniqueOwner names the owner of one run of lockd lock: host:pid:random.
func uniqueOwner() string {
	host, _ := os.Hostname()
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), base64.RawURLEncoding.EncodeToString(b[:]))
}

// commandEnv is CMD's environment: lockd lock's own without its bearer
// token, plus the lease's key, id and fencing token.
func commandEnv(lease *client.Lease) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKD_TOKEN=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"LOCKD_KEY="+lease.Key(),
		"LOCKD_LEASE_ID="+lease.ID(),
		"LOCKD_FENCING_TOKEN="+strconv.FormatUint(lease.FencingToken(), 10))
}

// run runs CMD while the lease is held and returns lockd lock's exit
// status. The lease is released only once CMD and every process it started
// are gone.
func (f *lockFlags) run(lease *client.Lease, sigs <-chan os.Signal, stderr io.Writer) int {
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if err := lease.Release(ctx); err != nil && !errors.Is(err, client.ErrLost) {
			fmt.Fprintln(stderr, "lockd lock: release:", err)
		}
	}
	ch, err := startChild(f.argv, commandEnv(lease), f.killAfter, stderr)
	if err != nil {
		release()
		fmt.Fprintln(stderr, "lockd lock:", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	lost := lease.Lost()
	for {
		select {
		case sig := <-sigs:
			ch.signal(sig)
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "lockd lock: %v; sending SIGTERM to %s\n", lease.Err(), f.argv[0])
			ch.stop()
		case <-ch.done():
			if err := lease.Err(); err != nil {
				// Lost while CMD ran, or too close to its end to tell:
				// nothing to release (this only stops keeping it).
				_ = lease.Release(context.Background())
				if lost != nil {
					fmt.Fprintf(stderr, "lockd lock: %v\n", err)
				}
				return exitLost
			}
			release()
			return ch.status()
		}
	}
}

// releaseTimeout bounds the release of the lease once CMD is gone.
const releaseTimeout = 10 * time.Second

// child is CMD as lockd lock runs it.
type child interface {
	// signal passes sig on to CMD's processes.
	signal(sig os.Signal)
	// stop ends CMD after the lease was lost: SIGTERM to its processes at
	// once, SIGKILL to those still running the kill-after later.
	stop()
	// done is closed once CMD has exited and every process it started
	// that lockd lock can find is gone.
	done() <-chan struct{}
	// status is lockd lock's exit status once done: CMD's own (128 + N
	// when signal N ended it).
	status() int
}

// exitStatus is CMD's exit status as a shell reports it: its code, or 128
// plus the signal that ended it.
func exitStatus(ps *os.ProcessState) int {
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return exitCannotRun
}

func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// writeKillNotice says that CMD (name) is sent SIGKILL, killAfter after its
// SIGTERM.
func writeKillNotice(stderr io.Writer, name string, killAfter time.Duration) {
	fmt.Fprintf(stderr, "lockd lock: %s still runs %v after SIGTERM; sending SIGKILL\n", name, killAfter)
}
