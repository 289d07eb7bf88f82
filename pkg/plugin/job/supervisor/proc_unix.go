//go:build unix

package supervisor

import "syscall"

// signalProcess sends sig to one process.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
