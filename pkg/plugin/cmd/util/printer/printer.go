// Package printer is the one output path of the commands whose result is not an API object
// (status, wait, replicas, diagnose, preflight, capacity, delete-artifacts, version, config
// view): one -o flag with kubectl's formats, built on cli-runtime's printers, and kubectl's error
// for a format it does not know. API objects go through cli-runtime's PrintFlags instead.
//
// It takes a pflag.FlagSet, not a cobra command, so that engines (which never import cobra) can
// print a result through it too (submit --wait prints wait's final status).
package printer

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// The formats a command handles itself, beside cli-runtime's.
const (
	// Name prints the objects the result names, one kind[.group]/name per line.
	Name = "name"
	// Wide is the table with its extra columns.
	Wide = "wide"
)

// Option sets what a command's result offers beyond the formats every command has.
type Option func(*Flags)

// WithNames is for results that name objects (a Job, its pods, nodes): -o name prints them.
func WithNames() Option { return func(f *Flags) { f.names = true } }

// WithTable is for commands whose default output is a table: -o wide adds its extra columns.
func WithTable() Option { return func(f *Flags) { f.table = true } }

// WithJSONIndent keeps a command's -o json indentation where scripts already have it (cli-runtime
// indents by four spaces).
func WithJSONIndent(indent string) Option { return func(f *Flags) { f.jsonIndent = indent } }

// Flags is the -o flag of one command and, after Validate, its printer.
type Flags struct {
	// Format is the -o value; "" is the command's own human output.
	Format string

	names, table bool
	jsonIndent   string

	jsonYaml *genericclioptions.JSONYamlPrintFlags
	template *genericclioptions.KubeTemplatePrintFlags
	fs       *pflag.FlagSet

	format  string // Format, lower-cased, or go-template when only --template was given
	printer printers.ResourcePrinter
}

// NewFlags makes the -o flag of a command.
func NewFlags(opts ...Option) *Flags {
	f := &Flags{jsonYaml: genericclioptions.NewJSONYamlPrintFlags(), template: genericclioptions.NewKubeTemplatePrintFlags()}
	for _, o := range opts {
		o(f)
	}
	return f
}

// AllowedFormats lists the -o values the command accepts, in kubectl's order.
func (f *Flags) AllowedFormats() []string {
	out := append([]string{}, f.jsonYaml.AllowedFormats()...)
	if f.names {
		out = append(out, Name)
	}
	out = append(out, f.template.AllowedFormats()...)
	if f.table {
		out = append(out, Wide)
	}
	return out
}

// AddFlags registers -o and kubectl's template flags. human says what the command prints
// without -o, for the help text.
func (f *Flags) AddFlags(fs *pflag.FlagSet, human string) {
	f.fs = fs
	fs.StringVarP(&f.Format, "output", "o", f.Format,
		fmt.Sprintf("Output format. One of: (%s). Without -o: %s.", strings.Join(f.AllowedFormats(), ", "), human))
	fs.StringVar(f.template.TemplateArgument, "template", *f.template.TemplateArgument, "Template string or path to template file to use when -o=go-template, -o=go-template-file. The template format is golang templates [http://golang.org/pkg/text/template/#pkg-overview].")
	// cobra's MarkFlagFilename, without importing cobra.
	_ = fs.SetAnnotation("template", "cobra_annotation_bash_completion_filename_extensions", []string{})
	fs.BoolVar(f.template.AllowMissingKeys, "allow-missing-template-keys", *f.template.AllowMissingKeys, "If true, ignore any errors in templates when a field or map key is missing in the template. Only applies to golang and jsonpath output formats.")
	// Accepted as kubectl accepts it; a result that is not an API object has no managed fields.
	fs.BoolVar(&f.jsonYaml.ShowManagedFields, "show-managed-fields", false, "If true, keep the managedFields when printing objects in JSON or YAML format.")
	_ = fs.MarkHidden("show-managed-fields")
}

// Validate checks -o and builds the printer, without contacting the server. An unknown format
// is a usage error with kubectl's text.
func (f *Flags) Validate() error {
	f.format = strings.ToLower(f.Format)
	// As kubectl: --template without -o means go-template.
	if f.format == "" && *f.template.TemplateArgument != "" && (f.fs == nil || !f.fs.Changed("output")) {
		f.format = "go-template"
	}
	switch {
	case f.format == "", f.names && f.format == Name, f.table && f.format == Wide:
		return nil
	}
	p, err := f.jsonYaml.ToPrinter(f.format)
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		tf := f.Format // not lower-cased: it holds the template
		if tf == "" {
			tf = f.format
		}
		p, err = f.template.ToPrinter(tf)
	}
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return exitcode.WithCode(exitcode.Usage, genericclioptions.NoCompatiblePrinterError{OutputFormat: &f.Format, AllowedFormats: f.AllowedFormats()})
	}
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	f.printer = p
	return nil
}

// Human reports whether the command prints its own human output: no -o, or -o wide.
func (f *Flags) Human() bool { return f.format == "" || f.format == Wide }

// Wide reports whether -o wide was asked for.
func (f *Flags) Wide() bool { return f.format == Wide }

// PrintTable prints the human table, wide with -o wide.
func (f *Flags) PrintTable(w io.Writer, t *metav1.Table) error {
	return printers.NewTablePrinter(printers.PrintOptions{Wide: f.Wide()}).PrintObj(t, w)
}

// Print writes doc (any JSON-able value) in the machine format of -o; names are the objects the
// result names ("job.batch/train-1"), printed by -o name. jsonpath and go-template evaluate over
// the document -o json shows.
func (f *Flags) Print(w io.Writer, doc any, names ...string) error {
	if f.format == Name {
		for _, n := range names {
			if _, err := fmt.Fprintln(w, n); err != nil {
				return err
			}
		}
		return nil
	}
	if f.printer == nil {
		return fmt.Errorf("printer: Print without a machine format (-o %q)", f.Format)
	}
	if f.format == "json" && f.jsonIndent != "" {
		b, err := json.MarshalIndent(doc, "", f.jsonIndent)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if _, ok := f.printer.(*printers.GoTemplatePrinter); ok && len(raw) > 0 && raw[0] == '[' {
		return f.arrayTemplate(w, raw)
	}
	// Wrapping the JSON in a runtime.Unknown is how cli-runtime's printers accept a document
	// that is not an API object.
	return f.printer.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, w)
}

// arrayTemplate runs a go-template over a result that is a JSON array (replicas, preflight):
// cli-runtime's go-template printer decodes only JSON objects.
func (f *Flags) arrayTemplate(w io.Writer, raw []byte) error {
	text, err := f.templateText()
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	t, err := template.New("output").Funcs(template.FuncMap{"base64decode": base64decode}).Parse(text)
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, fmt.Errorf("error parsing template %s, %w", text, err))
	}
	if *f.template.AllowMissingKeys {
		t.Option("missingkey=default")
	} else {
		t.Option("missingkey=error")
	}
	var data []any
	if err := json.Unmarshal(raw, &data); err != nil {
		return err
	}
	if err := t.Execute(w, data); err != nil {
		return fmt.Errorf("error executing template %q: %w", text, err)
	}
	return nil
}

// templateText is the go-template of -o, as cli-runtime's GoTemplatePrintFlags reads it.
func (f *Flags) templateText() (string, error) {
	name, arg, _ := strings.Cut(f.Format, "=")
	if f.Format == "" {
		name = f.format
	}
	if arg == "" {
		arg = *f.template.TemplateArgument
	}
	if name == "go-template-file" || name == "templatefile" {
		b, err := os.ReadFile(arg)
		if err != nil {
			return "", fmt.Errorf("error reading --template %s, %w", arg, err)
		}
		return string(b), nil
	}
	return arg, nil
}

func base64decode(v string) (string, error) {
	data, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("base64 decode failed: %w", err)
	}
	return string(data), nil
}
