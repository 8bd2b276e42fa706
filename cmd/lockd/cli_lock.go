package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
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

// acquireMargin is how long beyond --wait lockd lock keeps trying replicas
// that do not answer before it gives up.
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
	fs := newClientFlagSet("lockd lock", lockUsage, "Runs CMD while holding the lock KEY; see the README for exit statuses.", stderr)
	f.client.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 0, "lease ttl, renewed about every ttl/3 while CMD runs; 0 = lockd's default (30s)")
	fs.DurationVar(&f.wait, "wait", 30*time.Second, "how long to wait for the lock; 0 tries once")
	fs.BoolVar(&f.read, "read", false, "take a shared (read) lock instead of an exclusive one")
	fs.IntVar(&f.permits, "n", 0, "take one of N permits of the semaphore KEY instead of the lock (at most N holders at once)")
	fs.StringVar(&f.owner, "owner", "", "owner name; the same owner re-enters its lease (default: unique to this run)")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "after the lease is lost and CMD got SIGTERM, SIGKILL it this much later")
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
	c, err := f.client.dial(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "lockd lock:", err)
		return exitUsage
	}
	defer c.Close()

	// Signals are caught from the start: while waiting for the lock they
	// end the wait; while CMD runs they are passed on to it.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	lease, code := f.acquire(c, sigs, stderr)
	if lease == nil {
		return code
	}
	return f.run(lease, sigs, stderr)
}

// acquire waits for the lock; without it, it returns the exit status.
func (f *lockFlags) acquire(c *client.Client, sigs <-chan os.Signal, stderr io.Writer) (*client.Lease, int) {
	opts := []client.AcquireOption{client.WithWait(f.wait)}
	if f.ttl > 0 {
		opts = append(opts, client.WithTTL(f.ttl))
	}
	if f.owner != "" {
		opts = append(opts, client.WithOwner(f.owner))
	}
	// The wait is bounded, and so is the time spent retrying replicas that
	// do not answer.
	ctx, cancel := context.WithTimeout(context.Background(), f.wait+acquireMargin)
	defer cancel()
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
		cancel()
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
	case res.err != nil:
		fmt.Fprintln(stderr, "lockd lock:", res.err)
		return nil, exitUnavailable
	}
	return res.lease, 0
}

// run runs CMD while the lease is held and returns lockd lock's exit status.
func (f *lockFlags) run(lease *client.Lease, sigs <-chan os.Signal, stderr io.Writer) int {
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lease.Release(ctx); err != nil && !errors.Is(err, client.ErrLost) {
			fmt.Fprintln(stderr, "lockd lock: release:", err)
		}
	}
	cmd := exec.Command(f.argv[0], f.argv[1:]...)
	cmd.Env = append(os.Environ(),
		"LOCKD_KEY="+f.key,
		"LOCKD_LEASE_ID="+lease.ID(),
		"LOCKD_FENCING_TOKEN="+strconv.FormatUint(lease.FencingToken(), 10))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	attr, restoreTerminal := childAttr()
	cmd.SysProcAttr = attr
	defer restoreTerminal()

	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// The child's parent-death signal belongs to the thread that
		// started it: that thread stays with the child until it exits.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		release()
		fmt.Fprintln(stderr, "lockd lock:", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}

	lost := lease.Lost()
	var kill <-chan time.Time
	for {
		select {
		case sig := <-sigs:
			_ = signalGroup(cmd.Process, sig)
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "lockd lock: %v; sending SIGTERM to %s\n", lease.Err(), f.argv[0])
			_ = signalGroup(cmd.Process, syscall.SIGTERM)
			kill = time.After(f.killAfter)
		case <-kill:
			fmt.Fprintf(stderr, "lockd lock: %s still runs %v after SIGTERM; sending SIGKILL\n", f.argv[0], f.killAfter)
			_ = signalGroup(cmd.Process, syscall.SIGKILL)
		case <-exited:
			if lease.Err() != nil {
				// Lost while CMD ran, or too close to its end to tell.
				if lost != nil {
					fmt.Fprintf(stderr, "lockd lock: %v\n", lease.Err())
				}
				return exitLost
			}
			release()
			return exitStatus(cmd.ProcessState)
		}
	}
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
