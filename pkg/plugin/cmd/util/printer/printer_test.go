package printer_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// parse registers f's flags on a fresh flag set and parses args, as cobra would.
func parse(t *testing.T, f *printer.Flags, args ...string) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs, "a table")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}

func printed(t *testing.T, f *printer.Flags, doc any, names ...string) string {
	t.Helper()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := f.Print(&b, doc, names...); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

type result struct {
	Name  string `json:"name"`
	Ready int    `json:"ready"`
}

func TestFormats(t *testing.T) {
	doc := result{Name: "train", Ready: 2}
	for _, tc := range []struct {
		opts []printer.Option
		args []string
		want string
	}{
		{nil, []string{"-o", "json"}, "{\n    \"name\": \"train\",\n    \"ready\": 2\n}\n"},
		{[]printer.Option{printer.WithJSONIndent("  ")}, []string{"-o", "json"}, "{\n  \"name\": \"train\",\n  \"ready\": 2\n}\n"},
		{nil, []string{"-o", "yaml"}, "name: train\nready: 2\n"},
		{nil, []string{"-o", "jsonpath={.ready}"}, "2"},
		{nil, []string{"-o", "go-template={{.name}}"}, "train"},
		// As kubectl: --template alone means go-template.
		{nil, []string{"--template", "{{.name}}/{{.ready}}"}, "train/2"},
		{[]printer.Option{printer.WithNames()}, []string{"-o", "name"}, "job.batch/train\n"},
	} {
		f := printer.NewFlags(tc.opts...)
		parse(t, f, tc.args...)
		if got := printed(t, f, doc, "job.batch/train"); got != tc.want {
			t.Errorf("%v = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// cli-runtime's go-template printer decodes only objects; replicas and preflight print arrays.
func TestGoTemplateOverAnArray(t *testing.T) {
	doc := []result{{Name: "a"}, {Name: "b"}}
	f := printer.NewFlags()
	parse(t, f, "-o", `go-template={{range .}}{{.name}} {{end}}`)
	if got := printed(t, f, doc); got != "a b " {
		t.Errorf("got %q", got)
	}
	f = printer.NewFlags()
	parse(t, f, "-o", `go-template={{range .}}{{.missing}}{{end}}`, "--allow-missing-template-keys=false")
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := f.Print(&bytes.Buffer{}, doc); err == nil {
		t.Error("a missing key with --allow-missing-template-keys=false printed")
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		opts []printer.Option
		args []string
		want string
	}{
		{nil, []string{"-o", "bogus"}, `unable to match a printer suitable for the output format "bogus", allowed formats are: go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,kyaml,template,templatefile,yaml`},
		// name and wide only where the command offers them.
		{nil, []string{"-o", "name"}, `output format "name"`},
		{[]printer.Option{printer.WithNames()}, []string{"-o", "wide"}, `allowed formats are: go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,kyaml,name,template,templatefile,yaml`},
		{nil, []string{"-o", "jsonpath={.a"}, "unclosed action"},
		{nil, []string{"-o", "jsonpath"}, "template format specified but no template given"},
	} {
		f := printer.NewFlags(tc.opts...)
		parse(t, f, tc.args...)
		err := f.Validate()
		if exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v (exit %d), want a usage error with %q", tc.args, err, exitcode.Of(err), tc.want)
		}
	}
}

func TestHumanAndWide(t *testing.T) {
	f := printer.NewFlags(printer.WithTable())
	parse(t, f, "-o", "wide")
	if err := f.Validate(); err != nil || !f.Human() || !f.Wide() {
		t.Errorf("-o wide: err %v, human %v, wide %v", err, f.Human(), f.Wide())
	}
	f = printer.NewFlags(printer.WithTable())
	parse(t, f)
	if err := f.Validate(); err != nil || !f.Human() || f.Wide() {
		t.Errorf("no -o: err %v, human %v, wide %v", err, f.Human(), f.Wide())
	}
}
