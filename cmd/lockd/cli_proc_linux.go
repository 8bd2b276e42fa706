package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux lockd lock runs CMD under a guardian: lockd's own binary run
// again (argv[0] guardName), in a process group of its own, that becomes a
// child subreaper, starts CMD in CMD's own process group and stays CMD's
// parent. Every process CMD starts, however it detaches (a new process
// group or session, a parent that exits), stays a descendant of the
// guardian: orphans are re-parented to it, not to init. The guardian exits
// only once CMD and every such process are gone, so lockd lock, waiting
// for it, releases the lease only then.
//
// Killed uncleanly, either process leaves the other to finish:
//
//   - lockd lock gone (SIGKILL, a crash): its lease is not released (it
//     holds it as an owner of its own, not one released when its
//     connection closes) and runs out at its ttl, renewed no more. The
//     guardian sees its control pipe close and kills every process below
//     it with SIGKILL at once, long before that.
//   - the guardian gone: the kernel kills CMD (its parent-death signal),
//     and what CMD started is re-parented to lockd lock, itself a child
//     subreaper, which kills it all before it releases the lease.
//
// Both killed at once (kill -9 of both, an OOM kill of both) leave CMD's
// processes to whoever kills them, as does a service manager that kills
// the whole cgroup (which kills them too).

// guardName is argv[0] of the guardian.
const guardName = "lockd-lock-guard"

// ctlStop on the control pipe asks the guardian to stop CMD (the lease was
// lost); any other byte is a signal's number, to pass on to CMD's group.
const ctlStop = 0

// guarded is CMD run under a guardian.
type guarded struct {
	cmd     *exec.Cmd
	ctl     *os.File // the control pipe's write end
	name    string
	stderr  io.Writer
	restore func()
	exited  chan struct{}
	code    int
}

// startChild starts the guardian, which starts CMD (argv, with env).
func startChild(argv, env []string, killAfter time.Duration, stderr io.Writer) (child, error) {
	// What a guardian that dies leaves behind comes to lockd lock.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("becoming a child subreaper: %w", err)
	}
	fg, restore := foreground()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: append([]string{guardName, strconv.Itoa(os.Getpid()), killAfter.String(), strconv.FormatBool(fg), "--"}, argv...),
		Env:  env,
		// A process group of its own: a signal to lockd lock's group (a
		// shell's job) does not take the guardian along.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		ExtraFiles:  []*os.File{r},
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("starting the guardian of %s: %w", argv[0], err)
	}
	g := &guarded{cmd: cmd, ctl: w, name: argv[0], stderr: stderr, restore: restore, exited: make(chan struct{})}
	go g.wait()
	return g, nil
}

func (g *guarded) wait() {
	_ = g.cmd.Wait()
	_ = g.ctl.Close()
	ws, _ := g.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		fmt.Fprintf(g.stderr, "lockd lock: the guardian of %s was killed (%v); stopping every process %s left\n", g.name, ws.Signal(), g.name)
		g.code = exitSignal + int(ws.Signal())
	} else {
		g.code = ws.ExitStatus()
	}
	// Nothing is left unless the guardian died uncleanly: then CMD's
	// processes are lockd lock's children now.
	for reap(nil) {
		signalTree(0, syscall.SIGKILL)
		time.Sleep(killRound)
	}
	g.restore()
	close(g.exited)
}

func (g *guarded) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 256 {
		_, _ = g.ctl.Write([]byte{byte(s)})
	}
}

func (g *guarded) stop() { _, _ = g.ctl.Write([]byte{ctlStop}) }

func (g *guarded) done() <-chan struct{} { return g.exited }

func (g *guarded) status() int { return g.code }

// killRound is how often the processes left are sent SIGKILL again (those
// re-parented meanwhile included) until none is left.
const killRound = 20 * time.Millisecond

// reap reaps every child that has exited, passing each to exited (when
// not nil), and reports whether any child is left.
func reap(exited func(pid int, ws unix.WaitStatus)) (left bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return false
		case err != nil || pid == 0:
			return true
		}
		if exited != nil {
			exited(pid, ws)
		}
	}
}

// signalTree sends sig to the process group pgid (unless 0) and to every
// descendant of this process.
func signalTree(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
	self := os.Getpid()
	below := descendants(self)
	mine := map[int]bool{self: true}
	for _, pid := range below {
		mine[pid] = true
	}
	for _, pid := range below {
		signalDescendant(pid, sig, mine)
	}
}

// signalDescendant sends sig to pid if it still is the child of one of
// mine: through a pidfd where the kernel has them, so that a pid reused
// since /proc was read is never signalled.
func signalDescendant(pid int, sig syscall.Signal, mine map[int]bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		if ppid, ok := parentOf(pid); ok && mine[ppid] {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if ppid, ok := parentOf(pid); ok && mine[ppid] {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// descendants returns the processes below pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(p); ok {
			kids[ppid] = append(kids[ppid], p)
		}
	}
	var out []int
	for next := []int{pid}; len(next) > 0; {
		p := next[0]
		next = next[1:]
		out = append(out, kids[p]...)
		next = append(next, kids[p]...)
	}
	return out
}

// parentOf returns the parent of pid, from /proc/pid/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	// pid (comm) state ppid ...: comm may hold anything, ')' included.
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, err == nil
}
