//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are passed on from lockd lock to CMD.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// childAttr runs CMD in a process group of its own, so that a signal (and
// the kill after a lost lease) reaches every process CMD started. On a
// terminal where lockd is in the foreground, CMD's group takes the
// foreground (the keyboard's signals go to it, and it may read the
// terminal) until restore gives it back.
func childAttr() (attr *syscall.SysProcAttr, restore func()) {
	attr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	restore = func() {}
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil || fg != syscall.Getpgrp() {
		return attr, restore // not a terminal, or lockd runs in the background
	}
	attr.Foreground, attr.Ctty = true, 0
	return attr, func() {
		// Taking the terminal back from the background is allowed only
		// while SIGTTOU is ignored.
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, fg)
	}
}

// signalGroup sends sig to CMD's process group.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	return syscall.Kill(-p.Pid, s)
}
