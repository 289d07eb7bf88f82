//go:build unix

// Package procgroup starts a command in a process group of its own and signals the whole group:
// the one home of that for the supervisor's command and the MPI agent's.
package procgroup

import (
	"os"
	"os/exec"
	"syscall"
)

// Own starts the command in a process group of its own, so that a stop reaches every
// process it started (torchrun's workers, a shell's children) and a kill leaves none behind.
func Own(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// Signal sends sig to the command's process group (its pid is the group's id).
func Signal(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if err := syscall.Kill(-p.Pid, s); err != nil {
		// The leader alone, should the group be gone already.
		return p.Signal(sig)
	}
	return nil
}
