package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guardian runs before main: lockd lock starts it as lockd's own
// binary with argv[0] guardName (see cli_proc_linux.go).
func init() {
	if len(os.Args) > 0 && os.Args[0] == guardName {
		os.Exit(guard(os.Args[1:], os.Stderr))
	}
}

// guardian is the state of the guardian's loop.
type guardian struct {
	name      string
	stderr    io.Writer
	killAfter time.Duration
	cmd       int  // CMD's pid, and its process group's id
	cmdDone   bool // CMD has exited and is reaped
	code      int  // CMD's exit status, once cmdDone
	stopping  bool // SIGTERM sent to every process left
	killing   bool // SIGKILL sent, and sent again every killRound
}

// guard is the guardian: args are lockd lock's pid, --kill-after, whether
// CMD takes the terminal's foreground, "--", then CMD. Its control pipe
// from lockd lock is fd 3. It returns CMD's exit status once CMD and every
// process below the guardian are gone.
func guard(args []string, stderr io.Writer) int {
	// CMD's parent-death signal belongs to the thread that starts it:
	// this one, kept until the guardian exits.
	runtime.LockOSThread()
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(stderr, "lockd lock: the guardian was started without a command")
		return exitCannotRun
	}
	parent, err1 := strconv.Atoi(args[0])
	killAfter, err2 := time.ParseDuration(args[1])
	fg, err3 := strconv.ParseBool(args[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(stderr, "lockd lock: the guardian's arguments:", err)
		return exitCannotRun
	}
	argv := args[4:]
	syscall.CloseOnExec(3)
	ctl := os.NewFile(3, "control pipe")

	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	fwd := make(chan os.Signal, 8)
	signal.Notify(fwd, forwardedSignals...)
	// A closed stderr (lockd lock's reader gone) must not end the
	// guardian before CMD: SIGPIPE is caught (and reset for CMD by exec).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(stderr, "lockd lock: the guardian cannot become a child subreaper:", err)
		return exitCannotRun
	}
	if os.Getppid() != parent {
		return exitCannotRun // lockd lock died before CMD could start
	}

	pid, err := startCommand(argv, fg)
	if err != nil {
		fmt.Fprintln(stderr, "lockd lock:", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	g := &guardian{name: argv[0], stderr: stderr, killAfter: killAfter, cmd: pid}
	return g.loop(chld, fwd, readControl(ctl))
}

// startCommand starts CMD in a process group of its own, killed by the
// kernel if the guardian dies, and returns its pid.
func startCommand(argv []string, fg bool) (int, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 0, err
	}
	attr := groupAttr(fg)
	attr.Pdeathsig = syscall.SIGKILL
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr,
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	// The guardian reaps its children itself (wait4 on any), not through p.
	_ = p.Release()
	return pid, nil
}

// readControl passes the control pipe's bytes on, and closes the channel
// when lockd lock is gone.
func readControl(ctl *os.File) <-chan byte {
	out := make(chan byte, 8)
	go func() {
		defer close(out)
		buf := make([]byte, 16)
		for {
			n, err := ctl.Read(buf)
			for _, b := range buf[:n] {
				out <- b
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

func (g *guardian) loop(chld, fwd <-chan os.Signal, ctl <-chan byte) int {
	var killTimer <-chan time.Time
	var rounds *time.Ticker
	var roundC <-chan time.Time
	kill := func() {
		if !g.killing {
			g.killing = true
			rounds = time.NewTicker(killRound)
			roundC = rounds.C
		}
		signalTree(g.group(), syscall.SIGKILL)
	}
	defer func() {
		if rounds != nil {
			rounds.Stop()
		}
	}()
	for {
		left := reap(func(pid int, ws unix.WaitStatus) {
			if pid == g.cmd {
				g.cmdDone, g.code = true, waitStatus(ws)
			}
		})
		if g.cmdDone && !left {
			return g.code
		}
		if g.cmdDone && !g.stopping && !g.killing {
			fmt.Fprintf(g.stderr, "lockd lock: %s exited, leaving processes running; sending them SIGTERM\n", g.name)
			g.stopping = true
			signalTree(0, syscall.SIGTERM)
			killTimer = time.After(g.killAfter)
		}
		select {
		case <-chld:
		case <-roundC:
			signalTree(g.group(), syscall.SIGKILL)
		case sig := <-fwd:
			g.forward(sig)
		case b, ok := <-ctl:
			switch {
			case !ok:
				// lockd lock is gone: its lease runs out, renewed no more.
				// Everything must be gone well before.
				ctl = nil
				kill()
			case b == ctlStop && !g.stopping && !g.killing:
				g.stopping = true
				signalTree(g.group(), syscall.SIGTERM)
				killTimer = time.After(g.killAfter)
			case b != ctlStop:
				g.forward(syscall.Signal(b))
			}
		case <-killTimer:
			killTimer = nil
			if !g.killing {
				writeKillNotice(g.stderr, g.name, g.killAfter)
				kill()
			}
		}
	}
}

// group is CMD's process group while CMD is not reaped (its id cannot be
// reused until then), else 0: the processes left are found one by one.
func (g *guardian) group() int {
	if g.cmdDone {
		return 0
	}
	return g.cmd
}

// forward passes a signal on to CMD's process group, or, once CMD has
// exited, to every process it left.
func (g *guardian) forward(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	if pgid := g.group(); pgid > 0 {
		_ = syscall.Kill(-pgid, s)
		return
	}
	signalTree(0, s)
}

// waitStatus is a wait status as a shell reports it: the exit code, or
// 128 plus the signal that ended the process.
func waitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ws.ExitStatus()
}
