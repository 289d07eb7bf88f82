//go:build unix

package logarchive

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup starts the command in a process group of its own, so that a stop reaches every
// process it started (torchrun's workers, a shell's children) and a kill leaves none behind.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the command's process group (its pid is the group's id).
func signalGroup(p *os.Process, sig os.Signal) error {
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
