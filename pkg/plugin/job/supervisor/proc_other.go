//go:build !unix

package supervisor

import (
	"errors"
	"syscall"
)

// signalProcess cannot signal where there are no Unix signals: the supervisor runs in Linux
// pods, this keeps the package building everywhere the plugin does.
func signalProcess(int, syscall.Signal) error { return errors.New("signals are Unix's") }
