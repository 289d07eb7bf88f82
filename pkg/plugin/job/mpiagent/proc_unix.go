//go:build unix

package mpiagent

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecProcess replaces this process with argv, as OpenMPI's fork agent (orte_fork_agent) is
// run: the daemon forks, then runs the agent with the process's own command line. With toPodLog,
// stdout and stderr first point at logs (PodLog); a file that cannot be opened leaves its stream
// to the daemon, which forwards it to mpirun as before. The process keeps the PID the daemon
// knows, so its signals and its exit status are its own.
func ExecProcess(argv []string, toPodLog bool, logs [2]string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no command to run")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if toPodLog {
		redirect(logs)
	}
	return syscall.Exec(path, argv, os.Environ())
}

// redirect points stdout and stderr at logs' files, each that opens for writing.
func redirect(logs [2]string) {
	for i, name := range logs {
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			continue
		}
		_ = unix.Dup2(int(f.Fd()), i+1)
		_ = f.Close()
	}
}
