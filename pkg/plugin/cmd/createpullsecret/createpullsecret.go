// Package createpullsecret implements `kubectl tao create-pull-secret`: an nvcr.io pull Secret made
// from NGC_KEY or stdin, so the key never reaches a command line, the output or an error.
package createpullsecret

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes/scheme"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/credentials"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/redact"
)

// EnvKey is where the key comes from unless --from-stdin.
const EnvKey = "NGC_KEY"

// maxKeyBytes bounds what is read from stdin: an NGC key is under 100 bytes.
const maxKeyBytes = 64 << 10

const example = `  # From the environment (NGC_KEY), in the current namespace
  kubectl tao create-pull-secret ngc

  # From stdin, e.g. a password manager; replace an existing one
  pass show ngc | kubectl tao create-pull-secret ngc -n ml --from-stdin --overwrite

  # See the Secret (key redacted) without creating it
  kubectl tao create-pull-secret ngc --dry-run=client

  # Then
  kubectl tao submit --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --image-pull-secret ngc ...`

// Options are the flags and argument of `kubectl tao create-pull-secret`.
type Options struct {
	PrintFlags *genericclioptions.PrintFlags
	Name       string
	FromStdin  bool
	Overwrite  bool
	DryRunFlag string

	namespace string
	key       string
	dryRun    cmdutil.DryRun
	printer   printers.ResourcePrinter

	factory cmdutil.Factory
	getenv  func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao create-pull-secret`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &Options{
		PrintFlags: genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		DryRunFlag: string(cmdutil.DryRunNone),
		factory:    f, getenv: getenv, IOStreams: streams,
	}
	cmd := &cobra.Command{
		Use:                   "create-pull-secret NAME [--from-stdin] [--overwrite] [--dry-run=client|server]",
		DisableFlagsInUseLine: true,
		Short:                 "Create the nvcr.io image pull Secret from NGC_KEY or stdin",
		Long: "Create a kubernetes.io/dockerconfigjson Secret that lets pods pull from nvcr.io, user $oauthtoken,\n" +
			"with the NGC API key from $NGC_KEY or, with --from-stdin, from standard input (a trailing newline is\n" +
			"dropped). The key is never taken as an argument, so it stays out of the process table and shell\n" +
			"history, and it never appears in the output or an error. An existing Secret is left alone (exit 4)\n" +
			"unless --overwrite.",
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exitcode.Usagef("expected one NAME for the Secret, got %d arguments (the key is read from $%s or stdin, never an argument)", len(args), EnvKey)
			}
			return nil
		},
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().BoolVar(&o.FromStdin, "from-stdin", false, "Read the key from standard input instead of $"+EnvKey+".")
	cmd.Flags().BoolVar(&o.Overwrite, "overwrite", false, "Replace the Secret if it exists.")
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	o.PrintFlags.AddFlags(cmd)
	return cmd
}

// Complete reads the key and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	o.Name = args[0]
	var err error
	if o.dryRun, err = cmdutil.CompleteDryRun(o.DryRunFlag, o.PrintFlags); err != nil {
		return err
	}
	// A dry run shows the Secret: YAML unless the user chose a format.
	if o.dryRun != cmdutil.DryRunNone && (o.PrintFlags.OutputFormat == nil || *o.PrintFlags.OutputFormat == "") {
		yaml := "yaml"
		o.PrintFlags.OutputFormat = &yaml
	}
	if o.printer, err = o.PrintFlags.ToPrinter(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if o.namespace, err = o.factory.Namespace(); err != nil {
		return err
	}
	if o.FromStdin {
		raw, err := io.ReadAll(io.LimitReader(o.In, maxKeyBytes+1))
		if err != nil {
			return fmt.Errorf("reading the key from stdin: %w", err)
		}
		if len(raw) > maxKeyBytes {
			return exitcode.Usagef("stdin holds more than %d bytes: that is not an NGC key", maxKeyBytes)
		}
		o.key = CleanKey(string(raw))
		return nil
	}
	o.key = CleanKey(credentials.FromEnv(o.getenv, EnvKey)[EnvKey])
	return nil
}

// Validate refuses an empty key and a name that is not one.
func (o *Options) Validate() error {
	if o.key == "" {
		if o.FromStdin {
			return exitcode.Usagef("no key on stdin: pipe the NGC API key in, e.g. `pass show ngc | kubectl tao create-pull-secret %s --from-stdin`", o.Name)
		}
		return exitcode.Usagef("no key: $%s is unset or empty; export it, or pipe the key in with --from-stdin", EnvKey)
	}
	if strings.ContainsAny(o.key, " \t\r\n") {
		return exitcode.Usagef("the key contains whitespace or several lines: give only the NGC API key")
	}
	return nil
}

// Run creates (or replaces) the Secret, or prints it redacted for a dry run.
func (o *Options) Run(ctx context.Context) error {
	secret := Build(o.namespace, o.Name, o.key)
	if o.dryRun == cmdutil.DryRunClient {
		return o.printer.PrintObj(Redact(secret), o.Out)
	}
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	secrets := client.CoreV1().Secrets(o.namespace)
	opts := metav1.CreateOptions{FieldManager: "kubectl-tao"}
	if o.dryRun == cmdutil.DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	got, err := secrets.Create(ctx, secret, opts)
	verb := "created"
	if apierrors.IsAlreadyExists(err) {
		if !o.Overwrite {
			return exitcode.WithCode(exitcode.AlreadyExists,
				fmt.Errorf("secret/%s already exists in namespace %s and was left untouched: pass --overwrite to replace it", o.Name, o.namespace))
		}
		uopts := metav1.UpdateOptions{FieldManager: "kubectl-tao", DryRun: opts.DryRun}
		got, err = secrets.Update(ctx, secret, uopts)
		verb = "replaced"
	}
	if err != nil {
		return redact.Error(fmt.Errorf("writing secret/%s in namespace %s: %w", o.Name, o.namespace, err), o.key)
	}
	got.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if o.dryRun == cmdutil.DryRunServer || (o.PrintFlags.OutputFormat != nil && *o.PrintFlags.OutputFormat != "" && *o.PrintFlags.OutputFormat != "name") {
		return o.printer.PrintObj(Redact(got), o.Out)
	}
	if verb == "replaced" {
		fmt.Fprintf(o.Out, "secret/%s replaced\n", o.Name)
		return nil
	}
	return o.printer.PrintObj(Redact(got), o.Out)
}
