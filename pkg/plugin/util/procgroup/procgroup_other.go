//go:build !unix

package procgroup

import (
	"os"
	"os/exec"
)

// Own does nothing where there are no process groups: the supervisor only runs in Linux
// pods, this keeps the package building everywhere the plugin does.
func Own(*exec.Cmd) {}

// Signal signals the command alone.
func Signal(p *os.Process, sig os.Signal) error { return p.Signal(sig) }
