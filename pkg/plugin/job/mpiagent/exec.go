package mpiagent

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/procgroup"
)

// killGrace is how long the output of a command whose client went away is still read after its
// process group was killed.
const killGrace = 5 * time.Second

// ShellExec runs each request as sshd would (ShellArgv), with env as its environment and the
// request's variables over it, in a process group of its own: a client that goes away kills
// the shell and the daemon it started alike. A command killed by a signal exits 128+signal, as
// a shell says. started, when set, is given each command's PID, which is its group's id.
func ShellExec(env []string, started func(pid int)) Exec {
	return func(ctx context.Context, req Request, stdout, stderr io.Writer) (int, error) {
		argv := ShellArgv(req.Argv)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = req.Dir
		cmd.Env = append(slices.Clone(env), req.Env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		procgroup.Own(cmd)
		cmd.Cancel = func() error { return procgroup.Signal(cmd.Process, os.Kill) }
		cmd.WaitDelay = killGrace
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		if started != nil {
			started(cmd.Process.Pid)
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, &exit):
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return exit.ExitCode(), nil
		}
		return 0, err
	}
}
