//go:build !unix

package logarchive

import (
	"os"
	"os/exec"
)

// ownGroup does nothing where there are no process groups: the supervisor only runs in Linux
// pods, this keeps the package building everywhere the plugin does.
func ownGroup(*exec.Cmd) {}

// signalGroup signals the command alone.
func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }
