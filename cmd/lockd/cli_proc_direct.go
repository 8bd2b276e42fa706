//go:build !linux

package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// direct is CMD run as lockd lock's own child, in a process group of its
// own where the system has them. Without Linux's child subreapers lockd
// lock cannot find the processes CMD leaves behind, nor outlive itself:
// signals reach CMD's process group, and a lockd lock killed with SIGKILL
// leaves CMD running.
type direct struct {
	cmd       *exec.Cmd
	killAfter time.Duration
	stderr    io.Writer
	restore   func()
	exited    chan struct{}
	stopping  chan struct{}
}

// startChild starts CMD (argv, with env) as a direct child.
func startChild(argv, env []string, killAfter time.Duration, stderr io.Writer) (child, error) {
	fg, restore := foreground()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = groupAttr(fg)
	if err := cmd.Start(); err != nil {
		restore()
		return nil, err
	}
	d := &direct{cmd: cmd, killAfter: killAfter, stderr: stderr, restore: restore, exited: make(chan struct{}), stopping: make(chan struct{})}
	go d.wait()
	return d, nil
}

func (d *direct) wait() {
	_ = d.cmd.Wait()
	d.restore()
	close(d.exited)
}

func (d *direct) signal(sig os.Signal) { _ = signalGroup(d.cmd.Process, sig) }

func (d *direct) stop() {
	_ = signalGroup(d.cmd.Process, syscall.SIGTERM)
	go func() {
		t := time.NewTimer(d.killAfter)
		defer t.Stop()
		select {
		case <-d.exited:
		case <-t.C:
			writeKillNotice(d.stderr, d.cmd.Args[0], d.killAfter)
			_ = signalGroup(d.cmd.Process, syscall.SIGKILL)
		}
	}()
}

func (d *direct) done() <-chan struct{} { return d.exited }

func (d *direct) status() int { return exitStatus(d.cmd.ProcessState) }
