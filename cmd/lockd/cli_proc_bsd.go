//go:build unix && !linux

package main

import "syscall"

// setParentDeathSignal does nothing: only Linux offers a parent-death
// signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}
