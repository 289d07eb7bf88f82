package diagnose

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
)

// output is the -o flag of replicas and diagnose: kubectl's json, yaml, jsonpath and
// go-template printers, applied to the SDK's JSON shapes (which are not API objects).
type output struct {
	flags   *genericclioptions.PrintFlags
	printer printers.ResourcePrinter
}

func newOutput() *output {
	f := genericclioptions.NewPrintFlags("")
	// The results are not Kubernetes objects, so there is no KIND/NAME to print.
	f.NamePrintFlags = nil
	return &output{flags: f}
}

func (o *output) addFlags(cmd *cobra.Command) { o.flags.AddFlags(cmd) }

func (o *output) format() string { return *o.flags.OutputFormat }

// human reports whether no -o was given: the table or report for people.
func (o *output) human() bool { return o.format() == "" }

// complete builds the printer for a machine format; extra are formats the command handles
// itself.
func (o *output) complete(extra ...string) error {
	if o.human() {
		return nil
	}
	for _, e := range extra {
		if o.format() == e {
			return nil
		}
	}
	p, err := o.flags.ToPrinter()
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	o.printer = p
	return nil
}

// print writes v (any JSON-able value) through the printer. Wrapping its JSON in a
// runtime.Unknown is how kubectl's printers accept a document that is not an API object.
func (o *output) print(v any, w io.Writer) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return o.printer.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, w)
}

// oneJob makes a missing or extra argument a usage error (exit 2), as every kubectl-tao
// command treats malformed input.
func oneJob(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return exitcode.Usagef("%s takes exactly one JOB argument, got %d", cmd.Name(), len(args))
	}
	return nil
}
