package main

import "syscall"

// Children get their own process group (so stop() can signal the whole group)
// and are SIGKILLed by the kernel if the harness dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
