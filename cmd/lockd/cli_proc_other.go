//go:build !unix

package main

import (
	"os"
	"syscall"
)

// forwardedSignals are passed on from lockd lock to CMD.
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// childAttr runs CMD as it is: without process groups there is nothing to
// set.
func childAttr() (*syscall.SysProcAttr, func()) { return nil, func() {} }

// signalGroup ends CMD for SIGTERM and SIGKILL (the only signals this
// platform can deliver to another process) and passes others on as they are.
func signalGroup(p *os.Process, sig os.Signal) error {
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		return p.Kill()
	}
	return p.Signal(sig)
}
