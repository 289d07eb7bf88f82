// Package version implements `kubectl tao version`. The values are stamped by the linker:
//
//	-X github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/version.version=v1.2.3 (and commit, buildDate)
package version

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/kubectl/pkg/util/templates"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
)

// Set by -ldflags -X at build time; the defaults mark a build that did not go through make.
var (
	version   = "v0.0.0-dev"
	commit    = "unknown"
	buildDate = "unknown"
)

// Info is the stable `-o json` shape of `kubectl tao version`.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns this binary's version information.
func Get() Info {
	return Info{
		Version:   version,
		Commit:    commit,
		BuildDate: buildDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// Options are the flags of `kubectl tao version`.
type Options struct {
	out *printer.Flags
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao version`.
func NewCmd(streams genericiooptions.IOStreams) *cobra.Command {
	// Two-space JSON, as version -o json has always printed.
	o := &Options{out: printer.NewFlags(printer.WithJSONIndent("  ")), IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the kubectl-tao version",
		Long: templates.LongDesc(`
			Print the version of kubectl-tao: the release, the commit it was built from, the
			commit's date, the Go version and the platform. It needs no cluster.`),
		Example: templates.Examples(`
			# One line, for humans
			kubectl tao version

			# The same as JSON, for scripts and bug reports
			kubectl tao version -o json`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run()
		},
	}
	o.out.AddFlags(cmd.Flags(), "one line")
	return cmd
}

// Validate checks the output format.
func (o *Options) Validate() error {
	return o.out.Validate()
}

// Run prints the version.
func (o *Options) Run() error {
	info := Get()
	if !o.out.Human() {
		return o.out.Print(o.Out, info)
	}
	_, err := fmt.Fprintf(o.Out, "kubectl-tao %s (commit %s, built %s, %s, %s)\n",
		info.Version, info.Commit, info.BuildDate, info.GoVersion, info.Platform)
	return err
}
