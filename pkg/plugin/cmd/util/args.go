package util

import (
	"github.com/spf13/cobra"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// ExactlyOneJob is a cobra.PositionalArgs for commands that take one JOB: a wrong count is a
// usage error (exit 2), not cobra's plain error.
func ExactlyOneJob(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return exitcode.Usagef("expected one JOB (NAME, job/NAME or job.batch/NAME), got %d arguments", len(args))
	}
	return nil
}
