package stage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// The launcher's arguments go to the image's ssh whole, after the job's settings.
func TestMPISSHExecsSSH(t *testing.T) {
	var got []string
	o := &MPISSHOptions{exec: func(argv []string, toPodLog bool, _ [2]string) error {
		if toPodLog {
			t.Error("ssh's output must stay the launcher's")
		}
		got = argv
		return nil
	}}
	args := []string{"-x", "job-1.job", "orted", "-mca", "ess", "env"}
	if err := o.Complete(nil, args); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := append([]string{"ssh", "-F", "/tao-mpi/ssh_config"}, args...); !slices.Equal(got, want) {
		t.Errorf("exec %q, want %q", got, want)
	}
}

// Without a host or an ssh in the image it fails as ssh does, 255, saying why.
func TestMPISSHFailures(t *testing.T) {
	_, errOut, err := run(nil, "mpi-ssh")
	if code, ok := exitcode.PassedThrough(err); !ok || code != agentFailed || errOut != "tao-mpi-ssh: no host: the launcher runs it as ssh, HOST COMMAND...\n" {
		t.Errorf("no host: %v, stderr %q", err, errOut)
	}
	o := &MPISSHOptions{args: []string{"job-1.job", "true"}, exec: func([]string, bool, [2]string) error {
		return errors.New(`exec: "ssh": executable file not found in $PATH`)
	}}
	var buf strings.Builder
	o.ErrOut = &buf
	err = o.Run(context.Background())
	if code, ok := exitcode.PassedThrough(err); !ok || code != agentFailed ||
		buf.String() != "tao-mpi-ssh: running the image's ssh: exec: \"ssh\": executable file not found in $PATH (--launcher mpi-ssh needs an ssh client in the image; --launcher mpi needs nothing there)\n" {
		t.Errorf("no ssh: %v, stderr %q", err, buf.String())
	}
}
