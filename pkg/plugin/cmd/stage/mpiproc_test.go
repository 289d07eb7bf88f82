package stage

import (
	"context"
	"slices"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// The process's output goes to the pod's own log on an MPI job's pods other than rank 0's.
func TestMPIProcToPodLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"rank 1", map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvNodeRank: "1", mpiagent.EnvLogPID: "26"}, true},
		{"rank 1 of an mpi-ssh job", map[string]string{jobspec.EnvLauncher: "mpi-ssh", jobspec.EnvNodeRank: "1", mpiagent.EnvLogPID: "26"}, true},
		{"rank 0", map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvNodeRank: "0", mpiagent.EnvLogPID: "26"}, false},
		{"one pod, no rank", map[string]string{jobspec.EnvLauncher: "mpi", mpiagent.EnvLogPID: "26"}, false},
		{"a rank that is not one", map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvNodeRank: "x", mpiagent.EnvLogPID: "26"}, false},
		{"not an MPI job", map[string]string{jobspec.EnvNodeRank: "1", mpiagent.EnvLogPID: "26"}, false},
		{"not started by the agent", map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvNodeRank: "1"}, false},
		{"a PID that is not one", map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvNodeRank: "1", mpiagent.EnvLogPID: "0"}, false},
	} {
		var gotArgv []string
		var gotTo bool
		var gotLogs [2]string
		o := &MPIProcOptions{getenv: func(k string) string { return tc.env[k] },
			exec: func(argv []string, toPodLog bool, logs [2]string) error {
				gotArgv, gotTo, gotLogs = argv, toPodLog, logs
				return nil
			}}
		if err := o.Complete(nil, []string{"python3", "-u", "train.py", "--lr", "1"}); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := o.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(gotArgv, []string{"python3", "-u", "train.py", "--lr", "1"}) || gotTo != tc.want || (tc.want && gotLogs != [2]string{"/proc/26/fd/1", "/proc/26/fd/2"}) {
			t.Errorf("%s: exec(%q, %v, %q), want the command whole and %v to the pod's log", tc.name, gotArgv, gotTo, gotLogs, tc.want)
		}
	}
}

func TestMPIProcFailures(t *testing.T) {
	_, errOut, err := run(nil, "mpi-proc")
	if exitcode.Of(err) != exitcode.Usage {
		t.Errorf("no command: %v (stderr %q), want a usage error", err, errOut)
	}
	// As a shell says a command it cannot find: 127, which mpirun reports for the process.
	_, errOut, err = run(nil, "mpi-proc", "no-such-program-here", "--flag")
	if code, ok := exitcode.PassedThrough(err); !ok || code != procNotRun ||
		errOut != "mpi-proc: no-such-program-here: exec: \"no-such-program-here\": executable file not found in $PATH\n" {
		t.Errorf("not found: %v, stderr %q", err, errOut)
	}
}
