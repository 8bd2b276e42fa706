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

// foreground reports whether lockd lock runs in the foreground of a
// terminal (its stdin). If so, CMD's process group takes the terminal's
// foreground (the keyboard's signals go to it, and it may read the
// terminal) until restore gives it back to lockd lock's group.
func foreground() (fg bool, restore func()) {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil || pgrp != syscall.Getpgrp() {
		return false, func() {} // not a terminal, or lockd runs in the background
	}
	return true, func() {
		// Taking the terminal back from the background is allowed only
		// while SIGTTOU is ignored.
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, pgrp)
	}
}

// groupAttr runs a process in a process group of its own (pgid = its
// pid), in the terminal's foreground when fg is set.
func groupAttr(fg bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Foreground: fg, Ctty: 0}
}

// signalGroup sends sig to the process group of p.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	return syscall.Kill(-p.Pid, s)
}
