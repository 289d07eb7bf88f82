// Package config implements `kubectl tao config view`: the defaults file, checked against
// submit's flags exactly as submit checks it.
package config

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/defaults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// NewCmd builds `kubectl tao config` and its `view` subcommand. getenv locates the file.
func NewCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the defaults file that kubectl tao submit reads",
		Long: `The defaults file holds submit flags a user would otherwise repeat on every submit (image,
pull secrets, tolerations, /dev/shm, ...).

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/configuration.md`,
		Example: `  # Show the defaults file and where it is
  kubectl tao config view`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	out := printer.NewFlags()
	view := &cobra.Command{
		Use:   "view",
		Short: "Print the defaults file, checked as submit checks it",
		Long: `Print the defaults file kubectl tao submit reads ($TAO_CONFIG, else
$XDG_CONFIG_HOME/kubectl-tao/config.yaml, else ~/.config/kubectl-tao/config.yaml), after checking
it exactly as submit does. The file's path goes to stderr, its content to stdout. No file is not
an error; a broken one exits 2 and names the file and line.`,
		Example: `  kubectl tao config view
  TAO_CONFIG=./team-defaults.yaml kubectl tao config view

  # The file's values as JSON, for scripts
  kubectl tao config view -o jsonpath='{.submit.image}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.Validate(); err != nil {
				return err
			}
			return view(streams, getenv, out)
		},
	}
	out.AddFlags(view.Flags(), "the file as YAML, in its own order")
	cmd.AddCommand(view)
	return cmd
}

func view(streams genericiooptions.IOStreams, getenv func(string) string, p *printer.Flags) error {
	file, err := defaults.Load(getenv, os.ReadFile)
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if file == nil {
		path, _ := defaults.Path(getenv)
		fmt.Fprintf(streams.ErrOut, "no defaults file at %s: submit uses only its flags\n", path)
		return nil
	}
	// Submit's job flags, declared once in jobflags, so the check is the one submit makes.
	if err := defaults.Check(file, jobflags.FlagSet()); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	out, err := defaults.Render(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(streams.ErrOut, "# %s\n", file.Path)
	if !p.Human() {
		// The document the file means: YAML's numbers and booleans, not the strings it was read as.
		doc, err := yaml.YAMLToJSON(out)
		if err != nil {
			return err
		}
		return p.Print(streams.Out, json.RawMessage(doc))
	}
	_, err = streams.Out.Write(out)
	return err
}
