package main

import "syscall"

// setParentDeathSignal has the kernel kill CMD if lockd dies (SIGKILL, a
// crash), so CMD never runs on once the lease can be released without it.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
