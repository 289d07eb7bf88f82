package submit

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/defaults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// defaultsFile applies the user's defaults file to submit's flags (see package defaults).
type defaultsFile struct {
	// getenv locates the file; nil reads none.
	getenv func(string) string
	// path and applied say what the file set, for error messages.
	path    string
	applied []string
}

// apply loads the file and sets the flags the command line left alone. A broken file is a
// usage error: nothing has been sent anywhere, and the message names the file and line.
func (d *defaultsFile) apply(cmd *cobra.Command) error {
	if d.getenv == nil {
		return nil
	}
	f, err := defaults.Load(d.getenv, os.ReadFile)
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if f == nil {
		return nil
	}
	// Local flags only: the kubeconfig, context and namespace are not submit's to default.
	if d.applied, err = defaults.Apply(f, cmd.LocalFlags()); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	d.path = f.Path
	return nil
}

// explain adds, to a usage error, which flags came from the defaults file: "invalid --shm-size"
// puzzles a user who typed no --shm-size.
func (d *defaultsFile) explain(err error) error {
	if len(d.applied) == 0 || !exitcode.IsUsage(err) {
		return err
	}
	return fmt.Errorf("%w\n(the defaults file %s set --%s)", err, d.path, strings.Join(d.applied, ", --"))
}
