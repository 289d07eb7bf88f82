package mpiagent

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

// killGrace is how long a command whose client went away has between SIGKILL of its shell and
// the end of the wait for its output.
const killGrace = 5 * time.Second

// ShellExec runs each request as sshd would (ShellArgv), with env as its environment and the
// request's variables over it. A command killed by a signal exits 128+signal, as a shell says.
func ShellExec(env []string) Exec {
	return func(ctx context.Context, req Request, stdout, stderr io.Writer) (int, error) {
		argv := ShellArgv(req.Argv)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = req.Dir
		cmd.Env = append(slices.Clone(env), req.Env...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = killGrace
		if err := cmd.Start(); err != nil {
			return 0, err
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
