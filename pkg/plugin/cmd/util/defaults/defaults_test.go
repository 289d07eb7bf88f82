package defaults

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestPath(t *testing.T) {
	tests := []struct {
		env          map[string]string
		want         string
		wantExplicit bool
	}{
		{map[string]string{"TAO_CONFIG": "/etc/tao.yaml", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/etc/tao.yaml", true},
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/kubectl-tao/config.yaml", false},
		{map[string]string{"XDG_CONFIG_HOME": "relative", "HOME": "/h"}, "/h/.config/kubectl-tao/config.yaml", false},
		{map[string]string{"HOME": "/h"}, "/h/.config/kubectl-tao/config.yaml", false},
		{map[string]string{}, "", false},
	}
	for _, tc := range tests {
		if got, explicit := Path(env(tc.env)); got != tc.want || explicit != tc.wantExplicit {
			t.Errorf("Path(%v) = %q, %v; want %q, %v", tc.env, got, explicit, tc.want, tc.wantExplicit)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kubectl-tao", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(good), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(env(map[string]string{"XDG_CONFIG_HOME": dir}), os.ReadFile)
	if err != nil || f == nil || f.Path != good || len(f.Submit) != 1 {
		t.Fatalf("Load = %+v, %v", f, err)
	}
	if f, err := Load(env(map[string]string{"XDG_CONFIG_HOME": t.TempDir()}), os.ReadFile); f != nil || err != nil {
		t.Fatalf("no file: Load = %+v, %v; want nothing", f, err)
	}
	_, err = Load(env(map[string]string{"TAO_CONFIG": filepath.Join(dir, "missing.yaml")}), os.ReadFile)
	if err == nil || !strings.Contains(err.Error(), "$TAO_CONFIG") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("a named file that is missing: %v", err)
	}
	_, err = Load(env(map[string]string{"HOME": dir}), func(string) ([]byte, error) { return nil, fs.ErrPermission })
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("unreadable file: %v", err)
	}
}

func TestParse(t *testing.T) {
	const head = "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\n"
	tests := []struct {
		name    string
		data    string
		want    []Setting
		wantErr string
	}{
		{"empty file", "", nil, ""},
		{"no submit", head, nil, ""},
		{"empty submit", head + "submit:\n", nil, ""},
		{"scalars and lists", head + `submit:
  image: nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt
  gpus: 8
  shm-size: 32Gi
  one-rank-per-node: true
  toleration: [dedicated=ml:NoSchedule]
  env:
    - NCCL_DEBUG=INFO
    - "A=has: colon"
  --cpu: 32
`, []Setting{
			{Flag: "image", Values: []string{"nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"}, Line: 4},
			{Flag: "gpus", Values: []string{"8"}, Line: 5},
			{Flag: "shm-size", Values: []string{"32Gi"}, Line: 6},
			{Flag: "one-rank-per-node", Values: []string{"true"}, Line: 7},
			{Flag: "toleration", Values: []string{"dedicated=ml:NoSchedule"}, List: true, Line: 8},
			{Flag: "env", Values: []string{"NCCL_DEBUG=INFO", "A=has: colon"}, List: true, Line: 9},
			{Flag: "cpu", Values: []string{"32"}, Line: 12},
		}, ""},
		{"not yaml", "a: [\n", nil, "cfg.yaml: yaml: line 1"},
		{"not a mapping", "- a\n", nil, "cfg.yaml:1: expected a mapping"},
		{"unknown top-level key", head + "sumbit:\n  image: x\n", nil, `cfg.yaml:3: unknown key "sumbit" (known: apiVersion, kind, submit)`},
		{"missing apiVersion", "kind: Config\n", nil, "cfg.yaml:1: missing apiVersion"},
		{"wrong apiVersion", "apiVersion: v1\nkind: Config\n", nil, `cfg.yaml:1: apiVersion "v1" is not supported: use kubectl-tao.dev/v1alpha1`},
		{"wrong kind", "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Pod\n", nil, `cfg.yaml:2: kind "Pod": want Config`},
		{"submit not a mapping", head + "submit: [a]\n", nil, "cfg.yaml:3: submit: expected a mapping"},
		{"key without value", head + "submit:\n  image:\n", nil, "cfg.yaml:4: submit: image has no value"},
		{"a mapping value", head + "submit:\n  env:\n    A: b\n", nil, "cfg.yaml:5: submit: env: expected a value or a list"},
		{"a nested list item", head + "submit:\n  env:\n    - [a]\n", nil, "cfg.yaml:5: submit: env: each item must be a value"},
		{"duplicate key", head + "submit:\n  image: a\n  image: b\n", nil, `cfg.yaml:5: submit: "image" given twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("cfg.yaml", []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, f.Submit); diff != "" {
				t.Fatalf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// submitFlags is a stand-in for submit's flag set: one flag of each kind.
type submitFlags struct {
	image, shm string
	gpus       int
	env, tol   []string
	deadline   time.Duration
	oneRank    bool
	dryRun     string
}

func newFlags() (*pflag.FlagSet, *submitFlags) {
	v := &submitFlags{gpus: 1}
	fs := pflag.NewFlagSet("submit", pflag.ContinueOnError)
	fs.StringVar(&v.image, "image", "", "")
	fs.StringVar(&v.shm, "shm-size", "", "")
	fs.IntVar(&v.gpus, "gpus", 1, "")
	fs.StringArrayVar(&v.env, "env", nil, "")
	fs.StringArrayVar(&v.tol, "toleration", nil, "")
	fs.DurationVar(&v.deadline, "deadline", 0, "")
	fs.BoolVar(&v.oneRank, "one-rank-per-node", false, "")
	fs.StringVar(&v.dryRun, "dry-run", "none", "")
	return fs, v
}

func TestMerge(t *testing.T) {
	s := []Setting{{Flag: "image"}, {Flag: "env", List: true}, {Flag: "gpus"}}
	tests := []struct {
		changed []string
		want    []string
	}{
		{nil, []string{"image", "env", "gpus"}},
		{[]string{"image"}, []string{"env", "gpus"}},
		{[]string{"env", "gpus", "other"}, []string{"image"}},
		{[]string{"image", "env", "gpus"}, nil},
	}
	for _, tc := range tests {
		var got []string
		for _, m := range Merge(s, func(f string) bool { return contains(tc.changed, f) }) {
			got = append(got, m.Flag)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("changed %v: Merge kept %v, want %v", tc.changed, got, tc.want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestApply(t *testing.T) {
	file := `apiVersion: kubectl-tao.dev/v1alpha1
kind: Config
submit:
  image: from-file
  shm-size: 32Gi
  gpus: 8
  env: [A=1, B=2]
  toleration: dedicated=ml:NoSchedule
  deadline: 72h
  one-rank-per-node: true
`
	tests := []struct {
		name        string
		args        []string
		want        submitFlags
		wantApplied []string
	}{
		{"the file alone", nil, submitFlags{image: "from-file", shm: "32Gi", gpus: 8, env: []string{"A=1", "B=2"},
			tol: []string{"dedicated=ml:NoSchedule"}, deadline: 72 * time.Hour, oneRank: true, dryRun: "none"},
			[]string{"image", "shm-size", "gpus", "env", "toleration", "deadline", "one-rank-per-node"}},
		{"flags win; a repeated flag replaces the file's list", []string{"--image", "cli", "--env", "C=3", "--gpus", "0", "--one-rank-per-node=false"},
			submitFlags{image: "cli", shm: "32Gi", gpus: 0, env: []string{"C=3"}, tol: []string{"dedicated=ml:NoSchedule"},
				deadline: 72 * time.Hour, oneRank: false, dryRun: "none"},
			[]string{"shm-size", "toleration", "deadline"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs, v := newFlags()
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			f, err := Parse("cfg.yaml", []byte(file))
			if err != nil {
				t.Fatal(err)
			}
			applied, err := Apply(f, fs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *v, cmp.AllowUnexported(submitFlags{})); diff != "" {
				t.Fatalf("flags mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantApplied, applied); diff != "" {
				t.Fatalf("applied mismatch (-want +got):\n%s", diff)
			}
			if !fs.Changed("shm-size") {
				t.Errorf("a defaulted flag must count as set, as if typed")
			}
		})
	}
}

func TestApplyShared(t *testing.T) {
	f, err := Parse("cfg.yaml", []byte(`apiVersion: kubectl-tao.dev/v1alpha1
kind: Config
submit:
  image: only-submit-has-this
  gpus: 8
  toleration: [a=b:NoSchedule, c:NoExecute]
  queue: team
`))
	if err != nil {
		t.Fatal(err)
	}
	// A command that takes some of submit's flags, as preflight does.
	fs := pflag.NewFlagSet("preflight", pflag.ContinueOnError)
	gpus := fs.Int("gpus", 1, "")
	tol := fs.StringArray("toleration", nil, "")
	queue := fs.String("queue", "", "")
	if err := fs.Parse([]string{"--queue", "mine"}); err != nil {
		t.Fatal(err)
	}
	applied, err := ApplyShared(f, fs)
	if err != nil {
		t.Fatal(err)
	}
	if *gpus != 8 || !reflect.DeepEqual(*tol, []string{"a=b:NoSchedule", "c:NoExecute"}) || *queue != "mine" {
		t.Errorf("gpus %d toleration %v queue %q; want 8, the file's two, and the flag's mine", *gpus, *tol, *queue)
	}
	if want := []string{"gpus", "toleration"}; !reflect.DeepEqual(applied, want) {
		t.Errorf("applied %v, want %v (image is not this command's, queue was given)", applied, want)
	}
	if applied, err := ApplyShared(nil, fs); applied != nil || err != nil {
		t.Errorf("no file: applied %v, %v; want nothing", applied, err)
	}
}

func TestCheck(t *testing.T) {
	const head = "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n"
	tests := []struct{ body, wantErr string }{
		{"  imag: x\n", `cfg.yaml:4: submit: "imag" is not a flag a defaults file can set (known: deadline, env, gpus, image, one-rank-per-node, shm-size, toleration)`},
		{"  dry-run: client\n", `"dry-run" is not a flag a defaults file can set`},
		{"  image: [a, b]\n", "cfg.yaml:4: submit: --image takes one value, not a list"},
		{"  gpus: eight\n", `cfg.yaml:4: submit: --gpus "eight": not a valid int`},
		{"  deadline: 3 days\n", `--deadline "3 days": not a valid duration`},
		{"  one-rank-per-node: yes please\n", "not a valid bool"},
		// Found by FuzzCheckValue: Check read 08 as decimal, and Apply then failed on it (the flag
		// reads integers in base 0, where a leading 0 is octal).
		{"  gpus: 08\n", `cfg.yaml:4: submit: --gpus "08": not a valid int`},
	}
	for _, tc := range tests {
		fs, _ := newFlags()
		f, err := Parse("cfg.yaml", []byte(head+tc.body))
		if err != nil {
			t.Fatal(err)
		}
		// A bad value is an error even when the command line overrides it: the file is wrong.
		_ = fs.Parse([]string{"--gpus", "2"})
		if _, err := Apply(f, fs); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want %q", tc.body, err, tc.wantErr)
		}
	}
}

// Check reads numbers as the flag does: what the command line takes, the file takes.
func TestCheckReadsIntegersAsTheFlag(t *testing.T) {
	fs, v := newFlags()
	f, err := Parse("cfg.yaml", []byte("apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  gpus: 0x10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(f, fs); err != nil || v.gpus != 16 {
		t.Fatalf("gpus: 0x10: Apply = %v, gpus %d; want 16", err, v.gpus)
	}
}

func TestRenderRoundTrips(t *testing.T) {
	in := "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  gpus: 8\n  env: [A=1, \"B=x: y\"]\n  one-rank-per-node: true\n"
	f, err := Parse("cfg.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(f)
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  gpus: 8\n  env:\n    - A=1\n    - 'B=x: y'\n  one-rank-per-node: true\n"
	if string(out) != want {
		t.Fatalf("Render:\n%s\nwant:\n%s", out, want)
	}
	back, err := Parse("again.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range back.Submit {
		back.Submit[i].Line = f.Submit[i].Line
	}
	if diff := cmp.Diff(f.Submit, back.Submit); diff != "" {
		t.Fatalf("round trip mismatch (-want +got):\n%s", diff)
	}
}
