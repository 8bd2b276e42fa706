//go:build linux

package redistest

import "syscall"

// sysProcAttr makes a server die with the test binary (see spawn).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
