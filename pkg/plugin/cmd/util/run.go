package util

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobref"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Runner is the Options of a command, in kubectl's three steps: Complete resolves what the
// flags and arguments leave open (it may read the namespace, files or stdin), Validate checks
// the result without contacting the server, Run does the work under the command's context.
type Runner interface {
	Complete(cmd *cobra.Command, args []string) error
	Validate() error
	Run(ctx context.Context) error
}

// RunE is a command's RunE for o: the three steps in order, stopping at the first error, so
// that bad input is refused before anything is sent to the cluster.
func RunE(o Runner) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}

// CompleteJob resolves the one JOB argument of a command (see jobref.Parse) and the namespace.
// The reference is checked first, so that a malformed JOB is a usage error whatever the
// kubeconfig holds.
func CompleteJob(f Factory, args []string) (namespace, name string, err error) {
	namespace, names, err := CompleteJobs(f, args[:1])
	if err != nil {
		return "", "", err
	}
	return namespace, names[0], nil
}

// CompleteJobs is CompleteJob for commands that take several JOBs: every one is checked before
// the namespace is resolved.
func CompleteJobs(f Factory, args []string) (namespace string, names []string, err error) {
	for _, a := range args {
		name, err := jobref.Parse(a)
		if err != nil {
			return "", nil, err
		}
		names = append(names, name)
	}
	if namespace, err = f.Namespace(); err != nil {
		return "", nil, err
	}
	return namespace, names, nil
}

// ValidateTimeout checks a --timeout value: 0 means no limit, a negative one is a usage error.
func ValidateTimeout(d time.Duration) error {
	if d < 0 {
		return exitcode.Usagef("invalid --timeout %s: must not be negative", d)
	}
	return nil
}
