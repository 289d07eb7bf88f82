package diagnose

import (
	"github.com/spf13/cobra"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// oneJob makes a missing or extra argument a usage error (exit 2), as every kubectl-tao
// command treats malformed input.
func oneJob(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return exitcode.Usagef("%s takes exactly one JOB argument, got %d", cmd.Name(), len(args))
	}
	return nil
}
