//go:build unix && !linux

package main

import "syscall"

// No Pdeathsig outside Linux: children outlive a SIGKILLed harness there.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
