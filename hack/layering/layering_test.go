// Package layering enforces the plugin's layering rule by folder, from the imports `go list`
// reports: commands under pkg/plugin/cmd/<command>, what they share under pkg/plugin/cmd/util,
// engines and cores everywhere else under pkg/plugin, test helpers under test/. depguard
// (.golangci.yml) says part of this too, but it matches import paths by prefix only, so it
// cannot say "no command imports another command".
package layering

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
)

const (
	module  = "github.com/kubectl-tao/kubectl-tao"
	root    = module + "/pkg/plugin"
	cmdTree = root + "/cmd"
	cmdUtil = cmdTree + "/util"
	cobra   = "github.com/spf13/cobra"
	binary  = module + "/cmd/kubectl-tao"
)

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// list runs `go list` from the module's root with args and decodes the stream of packages.
func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// modulePackages lists the module's packages under every build tag its tests use.
func modulePackages(t *testing.T) []pkg {
	t.Helper()
	seen := map[string]bool{}
	var all []pkg
	for _, tags := range []string{"", "e2e", "faults"} {
		for _, p := range list(t, "-tags="+tags, "./...") {
			if !seen[p.ImportPath] {
				seen[p.ImportPath] = true
				all = append(all, p)
			}
		}
	}
	return all
}

// under reports whether import path p is dir or inside it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// command returns the command folder p belongs to ("" when p is not a command's package):
// pkg/plugin/cmd/<command>[/...], never cmd/util.
func command(p string) string {
	if !under(p, cmdTree) || under(p, cmdUtil) || p == cmdTree {
		return ""
	}
	return strings.SplitN(strings.TrimPrefix(p, cmdTree+"/"), "/", 2)[0]
}

// violation says what is wrong with package p importing imp (from a test file when test), or ""
// when the layering allows it.
// Only the plugin's own packages are bound: tests and tools under test/ and hack/ may drive
// the command tree.
func violation(p, imp string, test bool) string {
	engine := under(p, module+"/pkg") && !under(p, cmdTree) && p != root
	switch {
	case engine && imp == cobra:
		return "only the commands (pkg/plugin/cmd/...) and the root command tree import cobra"
	case engine && under(imp, cmdTree):
		return "engines, cores and helpers never import a command or the commands' shared glue"
	case under(p, cmdUtil) && command(imp) != "":
		return "the commands' shared glue never imports a command"
	case command(p) != "" && command(imp) != "" && command(imp) != command(p):
		return "a command never imports another command (move what they share into an engine, or pkg/plugin/cmd/util)"
	case !test && under(p, module+"/pkg") && under(imp, module+"/test"):
		return "test helpers never link into the plugin"
	}
	return ""
}

// check returns every import of pkgs that breaks the layering. Test files count too, but may
// use the test helpers (and an external test imports its own package).
func check(pkgs []pkg) []string {
	var bad []string
	add := func(p, imp string, test bool) {
		if why := violation(p, imp, test); why != "" && imp != p {
			bad = append(bad, p+" imports "+imp+": "+why)
		}
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			add(p.ImportPath, imp, false)
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			add(p.ImportPath, imp, true)
		}
	}
	slices.Sort(bad)
	return slices.Compact(bad)
}

func TestLayering(t *testing.T) {
	for _, b := range check(modulePackages(t)) {
		t.Error(b)
	}
}

// TestCheckCatchesEachRule feeds check the imports each rule forbids, so that a rule cannot
// silently stop matching (a typo in a path constant, say).
func TestCheckCatchesEachRule(t *testing.T) {
	for _, tc := range []struct {
		p, imp string
		bad    bool
	}{
		{root + "/job/tail", cobra, true},
		{root + "/job/tail", cmdUtil, true},
		{root + "/job/tail", cmdUtil + "/printer", true},
		{root + "/storage/s3", cmdTree + "/logs", true},
		{cmdUtil, cmdTree + "/logs", true},
		{cmdUtil + "/printer", cmdTree + "/wait", true},
		{cmdTree + "/submit", cmdTree + "/wait", true},
		{cmdTree + "/logs", cmdTree + "/logsx", true},
		{root + "/job/jobspec", module + "/test/testutil/golden", true},
		{cmdTree + "/submit", cmdUtil, false},
		{cmdTree + "/submit", cmdUtil + "/printer", false},
		{cmdTree + "/submit", root + "/job/tail", false},
		{cmdTree + "/submit", cobra, false},
		{cmdTree + "/stage", cmdTree + "/stage/inner", false},
		{root, cmdTree + "/submit", false},
		{root, cobra, false},
		{root + "/job/tail", root + "/util/exitcode", false},
		{module + "/test/e2e", cmdTree + "/completion", false},
		{module + "/hack/docgen", cobra, false},
	} {
		if got := violation(tc.p, tc.imp, false) != ""; got != tc.bad {
			t.Errorf("violation(%s, %s) = %v, want %v", tc.p, tc.imp, got, tc.bad)
		}
	}
	// Test helpers: allowed in test files, refused in the package's own files.
	asTest := []pkg{{ImportPath: root + "/job/jobspec", TestImports: []string{module + "/test/testutil/golden"}}}
	if bad := check(asTest); len(bad) != 0 {
		t.Errorf("a test file importing a test helper was refused: %v", bad)
	}
	inCode := []pkg{{ImportPath: root + "/job/jobspec", Imports: []string{module + "/test/testutil/golden"}}}
	if bad := check(inCode); len(bad) != 1 {
		t.Errorf("plugin code importing a test helper was let through: %v", bad)
	}
	crossTest := []pkg{{ImportPath: cmdTree + "/submit", XTestImports: []string{cmdTree + "/wait"}}}
	if bad := check(crossTest); len(bad) != 1 {
		t.Errorf("a command's test importing another command was let through: %v", bad)
	}
}

// TestBinaryLinksNoTestCode: no fake clients and no test helper of this module in the plugin
// (client-go's own k8s.io/client-go/testing is linked by every typed client and stays).
func TestBinaryLinksNoTestCode(t *testing.T) {
	for _, p := range list(t, "-deps", binary) {
		if under(p.ImportPath, module+"/test") || strings.Contains(p.ImportPath, "/fake") {
			t.Errorf("%s links %s", binary, p.ImportPath)
		}
	}
}

// TestOneFolderPerCommand: `ls pkg/plugin/cmd` is the command list. Every top-level command of
// the tree has the folder named after it (dashes dropped), and every folder but util is a
// command.
func TestOneFolderPerCommand(t *testing.T) {
	var out bytes.Buffer
	tree := plugin.NewRootCmd(plugin.Deps{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out},
		Getenv:     func(string) string { return "" },
		Factory:    &fakefactory.Factory{},
		RandomName: func() string { return "abcde" },
	})
	var commands []string
	for _, c := range tree.Commands() {
		if c.Name() == "help" {
			continue
		}
		commands = append(commands, strings.ReplaceAll(c.Name(), "-", ""))
	}
	entries, err := os.ReadDir("../../pkg/plugin/cmd")
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != path.Base(cmdUtil) {
			folders = append(folders, e.Name())
		}
	}
	slices.Sort(commands)
	slices.Sort(folders)
	if !slices.Equal(commands, folders) {
		t.Errorf("top-level commands %v\nbut folders in pkg/plugin/cmd %v", commands, folders)
	}
}
