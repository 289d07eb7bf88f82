package util

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// DryRun says whether and where a mutating command only pretends.
type DryRun string

// The --dry-run values, as kubectl spells them.
const (
	DryRunNone   DryRun = "none"
	DryRunClient DryRun = "client"
	DryRunServer DryRun = "server"
)

// AddDryRunFlag adds kubectl's --dry-run flag. A bare --dry-run means client, as in kubectl.
func AddDryRunFlag(cmd *cobra.Command, target *string) {
	cmd.Flags().StringVar(target, "dry-run", string(DryRunNone),
		`Must be "none", "server", or "client". If client strategy, only print the object that would be sent, without sending it. If server strategy, submit server-side request without persisting the resource.`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = string(DryRunClient)
}

// ParseDryRun checks a --dry-run value.
func ParseDryRun(v string) (DryRun, error) {
	switch d := DryRun(v); d {
	case DryRunNone, DryRunClient, DryRunServer:
		return d, nil
	}
	return "", exitcode.Usagef(`invalid --dry-run value %q: must be "none", "server", or "client"`, v)
}

// CompleteDryRun checks a --dry-run value and, for a dry run, makes pf's printers say so
// ("job.batch/x created (server dry run)"), as kubectl create does.
func CompleteDryRun(v string, pf *genericclioptions.PrintFlags) (DryRun, error) {
	d, err := ParseDryRun(v)
	if err != nil {
		return "", err
	}
	switch d {
	case DryRunClient:
		err = pf.Complete("%s (dry run)")
	case DryRunServer:
		err = pf.Complete("%s (server dry run)")
	}
	return d, err
}
