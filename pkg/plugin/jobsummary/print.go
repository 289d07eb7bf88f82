package jobsummary

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
)

// Formats lists the -o values status and wait accept.
const Formats = "json, yaml, name, jsonpath=TEMPLATE"

// Printer prints Summaries in one output format.
type Printer struct {
	format string
	path   *jsonpath.JSONPath
}

// NewPrinter checks an -o value. "" is the human table.
func NewPrinter(output string) (*Printer, error) {
	p := &Printer{format: output}
	switch {
	case output == "", output == "json", output == "yaml", output == "name":
	case strings.HasPrefix(output, "jsonpath="):
		p.format = "jsonpath"
		p.path = jsonpath.New("status").AllowMissingKeys(true)
		if err := p.path.Parse(strings.TrimPrefix(output, "jsonpath=")); err != nil {
			return nil, exitcode.Usagef("invalid -o %s: %w", output, err)
		}
	default:
		return nil, exitcode.Usagef("unknown output format %q for -o: use one of %s", output, Formats)
	}
	return p, nil
}

// Human reports whether the printer makes the human table (no -o given).
func (p *Printer) Human() bool { return p.format == "" }

// Print writes s. now is for AGE in the human table.
func (p *Printer) Print(w io.Writer, s Summary, now time.Time) error {
	switch p.format {
	case "json":
		b, err := json.MarshalIndent(s, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(s)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "name":
		_, err := fmt.Fprintf(w, "job.batch/%s\n", s.Name)
		return err
	case "jsonpath":
		var data any
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &data); err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := p.path.Execute(&buf, data); err != nil {
			return fmt.Errorf("executing the jsonpath template: %w", err)
		}
		_, err = w.Write(buf.Bytes())
		return err
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(Table(s, now), w)
}

// Table is the human view of s: one kubectl-style row.
func Table(s Summary, now time.Time) *metav1.Table {
	age := cmdutil.Age(s.created, now)
	gpus := "0"
	if s.GPUs > 0 {
		gpus = fmt.Sprintf("%dx%d", s.GPUs, s.Nodes)
	}
	return &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name"},
			{Name: "Status", Type: "string"},
			{Name: "GPUs", Type: "string"},
			{Name: "Ready", Type: "string"},
			{Name: "Succeeded", Type: "integer"},
			{Name: "Failed", Type: "integer"},
			{Name: "Age", Type: "string"},
			{Name: "Message", Type: "string"},
		},
		Rows: []metav1.TableRow{{Cells: []any{
			s.Name, string(s.Status), gpus, fmt.Sprintf("%d/%d", s.Ready, s.Nodes), s.Succeeded, s.Failed, age, s.Message,
		}}},
	}
}
