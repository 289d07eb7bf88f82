package docgen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

const (
	architectureDoc = "../../docs/architecture.md"
	rootGo          = "../../pkg/plugin/root.go"
	module          = "github.com/kubectl-tao/kubectl-tao/"
	tableBegin      = "<!-- command-table:begin -->"
	tableEnd        = "<!-- command-table:end -->"
)

// docTable reads the command table of docs/architecture.md: `kubectl tao X` -> pkg/plugin/Y.
func docTable(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no command table between %q and %q", architectureDoc, tableBegin, tableEnd)
	}
	table := map[string]string{}
	for _, line := range strings.Split(doc[i+len(tableBegin):j], "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 2 || !strings.Contains(cells[0], "`kubectl tao") {
			continue
		}
		cmd := strings.Trim(strings.TrimSpace(cells[0]), "`")
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if _, dup := table[cmd]; dup {
			t.Errorf("%s: %s is listed twice", architectureDoc, cmd)
		}
		table[cmd] = pkg
	}
	if len(table) == 0 {
		t.Fatalf("%s: the command table has no rows", architectureDoc)
	}
	return table
}

// constructors returns, in order, the package (relative to the module) of every command that
// root.go adds to the root: the X of each X.NewSomethingCmd(...) argument of AddCommand.
func constructors(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rootGo, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
	}
	var pkgs []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "AddCommand" {
			return true
		}
		for _, arg := range call.Args {
			pkg := "?"
			if c, ok := arg.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && imports[id.Name] != "" {
						pkg = strings.TrimPrefix(imports[id.Name], module)
					}
				}
			}
			if pkg == "?" {
				t.Errorf("%s: AddCommand argument at %s is not a call of a package's constructor", rootGo, fset.Position(arg.Pos()))
			}
			pkgs = append(pkgs, pkg)
		}
		return true
	})
	return pkgs
}

// runPackage is the package (relative to the module) of the function a command runs, or ""
// when that says nothing: no function, or cmdutil.RunE's closure, which every command built on
// Options shares.
func runPackage(c *cobra.Command) string {
	var fn any
	switch {
	case c.RunE != nil:
		fn = c.RunE
	case c.Run != nil:
		fn = c.Run
	default:
		return ""
	}
	name := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	// "github.com/.../pkg/plugin/cmd/status.NewCmd.func1": the path up to the last slash, then the
	// package name up to the first dot after it.
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if slash < 0 || dot < 0 {
		return ""
	}
	pkg := strings.TrimPrefix(name[:slash+1+dot], module)
	if pkg == "pkg/plugin/cmd/util" {
		return ""
	}
	return pkg
}

// The table of docs/architecture.md names, for every command of the real tree (hidden ones
// too), the package that builds it: a command added by root.go belongs to the package of its
// constructor there (and must run a function of that package, when its RunE says which), a
// subcommand to the package of the function it runs, else to its parent's.
func TestArchitectureCommandTable(t *testing.T) {
	// In the order root.go adds them, to pair them with its constructor calls.
	cobra.EnableCommandSorting = false
	root := root()
	top := root.Commands()
	cobra.EnableCommandSorting = true

	ctors := constructors(t)
	if len(ctors) != len(top) {
		t.Fatalf("%s adds %d commands in AddCommand calls, the root has %d: the test cannot pair them", rootGo, len(ctors), len(top))
	}
	got := map[string]string{}
	var walk func(c *cobra.Command, pkg string)
	walk = func(c *cobra.Command, pkg string) {
		got[c.CommandPath()] = pkg
		for _, sub := range c.Commands() {
			p := runPackage(sub)
			if p == "" {
				p = pkg
			}
			walk(sub, p)
		}
	}
	got[root.CommandPath()] = "pkg/plugin"
	for i, c := range top {
		if run := runPackage(c); run != "" && run != ctors[i] {
			t.Errorf("%s is built in %s but runs a function of %s", c.CommandPath(), ctors[i], run)
		}
		walk(c, ctors[i])
	}

	want := docTable(t)
	var cmds []string
	for cmd := range got {
		cmds = append(cmds, cmd)
	}
	sort.Strings(cmds)
	for _, cmd := range cmds {
		switch w, ok := want[cmd]; {
		case !ok:
			t.Errorf("%s: the command table lacks `%s` (package %s)", architectureDoc, cmd, got[cmd])
		case w != got[cmd]:
			t.Errorf("%s: `%s` maps to %s, but its package is %s", architectureDoc, cmd, w, got[cmd])
		}
	}
	for cmd := range want {
		if _, ok := got[cmd]; !ok {
			t.Errorf("%s: the command table lists `%s`, which is no command of the tree", architectureDoc, cmd)
		}
	}
}
