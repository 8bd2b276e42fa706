//go:build !unix

package main

import (
	"os"
	"syscall"
)

// forwardedSignals are passed on from lockd lock to CMD.
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// foreground is false: without process groups there is no terminal to
// hand over.
func foreground() (bool, func()) { return false, func() {} }

// groupAttr runs CMD as it is: without process groups there is nothing to
// set.
func groupAttr(bool) *syscall.SysProcAttr { return nil }

// signalGroup ends CMD for SIGTERM and SIGKILL (the only signals this
// platform can deliver to another process) and passes others on as they are.
func signalGroup(p *os.Process, sig os.Signal) error {
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}
