package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	authv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

var outputNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// outputCase runs one command that has -o: its arguments and a fresh fake cluster per run.
type outputCase struct {
	args []string
	// setup makes the run's cluster, environment and stdin.
	setup func(t *testing.T) cmdtest.Cmd
	// path leads, in the -o json document, to a string that jsonpath and go-template must print.
	path []any
	// names: the result names objects, so -o name prints kind/name lines; table: -o wide.
	names, table bool
}

// The formats every command's -o accepts (the template ones get a template below).
var sharedFormats = []string{"json", "yaml", "jsonpath", "jsonpath-file", "go-template", "go-template-file"}

func outputCases() map[string]outputCase {
	onCluster := func(objs ...runtime.Object) func(*testing.T) cmdtest.Cmd {
		return func(*testing.T) cmdtest.Cmd {
			return cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(objs...), Now: outputNow}
		}
	}
	return map[string]outputCase{
		// Results that are not API objects: the shared printer.
		"status":   {args: []string{"train"}, setup: onCluster(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), fixture.RankPod(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), 0).Name("train-0").Node("gpu-a").Phase(corev1.PodRunning).Obj()), path: []any{"status"}, names: true, table: true},
		"wait":     {args: []string{"done"}, setup: onCluster(fixture.Job("done").Namespace("ml").UID("uid-2").Succeeded(1).Condition(batchv1.JobSuccessCriteriaMet, "", "").Condition(batchv1.JobComplete, "", "").Obj()), path: []any{"status"}, names: true},
		"replicas": {args: []string{"train"}, setup: onCluster(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), fixture.RankPod(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), 0).Name("train-0").Node("gpu-a").Phase(corev1.PodRunning).Obj()), path: []any{0, "name"}, names: true, table: true},
		"top":      {args: []string{"train"}, setup: onCluster(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), fixture.RankPod(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj(), 0).Name("train-0").Node("gpu-a").Phase(corev1.PodRunning).Obj()), path: []any{"ranks", 0, "pod"}, table: true},
		"diagnose": {args: []string{"done"}, setup: onCluster(fixture.Job("done").Namespace("ml").UID("uid-2").Succeeded(1).Condition(batchv1.JobSuccessCriteriaMet, "", "").Condition(batchv1.JobComplete, "", "").Obj()), path: []any{"status"}, names: true},
		"preflight": {args: []string{"--gpus", "8"}, setup: func(*testing.T) cmdtest.Cmd {
			return cmdtest.Cmd{NS: "ml", Client: preflightCluster()}
		}, path: []any{0, "name"}, table: true},
		"capacity":         {setup: onCluster(fixture.Node("gpu-a").Label("nvidia.com/gpu.product", "H100").Label("nvidia.com/gpu.driver.major", "580").Label("nvidia.com/cuda.driver.major", "13").Label("nvidia.com/cuda.driver.minor", "0").GPUs(8).Allocatable(corev1.ResourceCPU, "64").Allocatable(corev1.ResourceMemory, "1Ti").Obj(), fixture.Node("gpu-b").Label("nvidia.com/gpu.product", "H100").Label("nvidia.com/gpu.driver.major", "580").Label("nvidia.com/cuda.driver.major", "13").Label("nvidia.com/cuda.driver.minor", "0").GPUs(8).Allocatable(corev1.ResourceCPU, "64").Allocatable(corev1.ResourceMemory, "1Ti").Obj()), path: []any{"nodes", 1, "name"}, names: true, table: true},
		"delete-artifacts": {args: []string{"train", "--dry-run"}, setup: artifactsCluster, path: []any{"prefix"}, names: true},
		"results":          {setup: artifactsCluster, args: []string{"train"}, path: []any{"objects", 0, "key"}, table: true},
		"version":          {setup: onCluster(), path: []any{"platform"}},
		"config view": {setup: func(t *testing.T) cmdtest.Cmd {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte("apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return cmdtest.Cmd{NS: "ml", Env: map[string]string{"TAO_CONFIG": path}}
		}, path: []any{"submit", "image"}},
		// API objects: cli-runtime's PrintFlags (kubectl get's for list).
		"submit": {args: []string{"train", "--image", "img", "--dry-run=client", "--", "python", "train.py"}, setup: onCluster(),
			path: []any{"items", 0, "metadata", "name"}, names: true},
		"create-pull-secret": {args: []string{"ngc", "--from-stdin", "--dry-run=client"}, setup: func(*testing.T) cmdtest.Cmd {
			return cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(), Stdin: "nvapi-key\n"}
		}, path: []any{"metadata", "name"}, names: true},
		"scale": {args: []string{"train", "--nodes", "2"}, setup: onCluster(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Indexed().Nodes(1).Active(1).Annotation("kubectl-tao.dev/nodes", "1:3").Obj()),
			path: []any{"metadata", "name"}, names: true},
		"list": {setup: onCluster(fixture.Job("train").Namespace("ml").UID("uid-1").Created(outputNow.Add(-time.Hour)).Label("app.kubernetes.io/managed-by", "kubectl-tao").DefaultSelector().Active(1).Obj()), path: []any{"items", 0, "metadata", "name"}, names: true, table: true},
	}
}

// TestEveryOutputFlagAcceptsTheSharedFormats walks the real command tree: every command with
// -o/--output must have a case above (so a command added later is covered or the test fails),
// accept every shared format, print the document -o json shows, and refuse an unknown format
// with kubectl's text and the usage exit code.
func TestEveryOutputFlagAcceptsTheSharedFormats(t *testing.T) {
	cases := outputCases()
	found := map[string]bool{}
	root := plugin.NewRootCmd(plugin.Deps{
		Streams: genericiooptions.NewTestIOStreamsDiscard(), Getenv: func(string) string { return "" }, Factory: &fakefactory.Factory{},
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.LocalNonPersistentFlags().Lookup("output"); f != nil && f.Shorthand == "o" {
			found[strings.TrimPrefix(c.CommandPath(), root.CommandPath()+" ")] = true
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for name := range found {
		if _, ok := cases[name]; !ok {
			t.Errorf("%q has -o but no case in outputCases: add one", name)
		}
	}
	for name := range cases {
		if !found[name] {
			t.Errorf("outputCases has %q, which has no -o flag", name)
		}
	}
	for name, tc := range cases {
		if !found[name] {
			continue
		}
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) { checkFormats(t, name, tc) })
	}
}

func checkFormats(t *testing.T, name string, tc outputCase) {
	run := func(extra ...string) cmdtest.Result {
		t.Helper()
		// Flags before the arguments: submit's end with "-- COMMAND".
		args := append(append(strings.Fields(name), extra...), tc.args...)
		r := tc.setup(t).Run(context.Background(), args...)
		if r.Code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.Code, r.Stdout, r.Stderr)
		}
		return r
	}
	human := run()
	if human.Stdout == "" {
		t.Errorf("no -o: empty stdout")
	}

	var doc any
	out := run("-o", "json").Stdout
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	var fromYAML any
	out = run("-o", "yaml").Stdout
	if err := yaml.Unmarshal([]byte(out), &fromYAML); err != nil || !reflect.DeepEqual(fromYAML, doc) {
		t.Errorf("-o yaml is not the -o json document (%v):\n%s", err, out)
	}

	want, ok := at(doc, tc.path)
	if !ok || want == "" {
		t.Fatalf("-o json has no string at %v:\n%s", tc.path, out)
	}
	jp, gt := jsonPath(tc.path), goTemplate(tc.path)
	dir := t.TempDir()
	jpFile, gtFile := filepath.Join(dir, "jsonpath"), filepath.Join(dir, "template")
	if err := os.WriteFile(jpFile, []byte(jp), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gtFile, []byte(gt), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"jsonpath=" + jp, "jsonpath-file=" + jpFile, "go-template=" + gt, "go-template-file=" + gtFile} {
		if got := run("-o", format).Stdout; got != want {
			t.Errorf("-o %s = %q, want %q (from -o json)", format, got, want)
		}
	}

	if tc.names {
		got := run("-o", "name").Stdout
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		kindName := regexp.MustCompile(`^[a-z][a-z.]*/[a-z0-9][a-z0-9.-]*( \(dry run\))?$`)
		for _, l := range lines {
			if !kindName.MatchString(l) {
				t.Errorf("-o name: line %q is not kind/name:\n%s", l, got)
			}
		}
		if !strings.Contains(got, "/"+want) && !strings.Contains(out, strings.SplitN(lines[0], "/", 2)[1]) {
			t.Errorf("-o name = %q names nothing the document names", got)
		}
	}
	if tc.table {
		wide := run("-o", "wide").Stdout
		if len(headers(wide)) < len(headers(human.Stdout)) || headers(wide)[0] != headers(human.Stdout)[0] {
			t.Errorf("-o wide is not the table, widened:\n%s\nthe table:\n%s", wide, human.Stdout)
		}
	}

	args := append(append(strings.Fields(name), "-o", "bogus"), tc.args...)
	r := tc.setup(t).Run(context.Background(), args...)
	const prefix = `error: unable to match a printer suitable for the output format "bogus", allowed formats are: `
	if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.HasPrefix(r.Stderr, prefix) {
		t.Fatalf("-o bogus: exit %d (want %d), stdout %q, stderr %q", r.Code, exitcode.Usage, r.Stdout, r.Stderr)
	}
	allowed := strings.Split(strings.SplitN(strings.TrimPrefix(r.Stderr, prefix), "\n", 2)[0], ",")
	need := append([]string{}, sharedFormats...)
	if tc.names {
		need = append(need, "name")
	}
	if tc.table {
		need = append(need, "wide")
	}
	for _, f := range need {
		if !contains(allowed, f) {
			t.Errorf("-o bogus lists %v, without %q", allowed, f)
		}
	}
	for f, offered := range map[string]bool{"name": tc.names, "wide": tc.table} {
		if !offered && contains(allowed, f) {
			t.Errorf("-o bogus lists %q, which this command does not print", f)
		}
	}
	if !sort.StringsAreSorted(allowed) {
		t.Errorf("allowed formats not sorted as kubectl sorts them: %v", allowed)
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// at follows path (keys and indices) into a decoded JSON document.
func at(doc any, path []any) (string, bool) {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := doc.(map[string]any)
			if !ok {
				return "", false
			}
			doc = m[k]
		case int:
			a, ok := doc.([]any)
			if !ok || k >= len(a) {
				return "", false
			}
			doc = a[k]
		}
	}
	s, ok := doc.(string)
	return s, ok
}

func jsonPath(path []any) string {
	var b strings.Builder
	for _, p := range path {
		if i, ok := p.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%s", p)
		}
	}
	return "{" + b.String() + "}"
}

func goTemplate(path []any) string {
	var b strings.Builder
	for _, p := range path {
		if i, ok := p.(int); ok {
			fmt.Fprintf(&b, " %d", i)
		} else {
			fmt.Fprintf(&b, " %q", p)
		}
	}
	return "{{index ." + b.String() + "}}"
}

func headers(table string) []string {
	return strings.Fields(strings.SplitN(table, "\n", 2)[0])
}

// preflightCluster passes every check preflight FAILs on: a namespace, GPU nodes, a recent
// server, every permission.
func preflightCluster() *fake.Clientset {
	c := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, fixture.Node("gpu-a").Label("nvidia.com/gpu.product", "H100").Label("nvidia.com/gpu.driver.major", "580").Label("nvidia.com/cuda.driver.major", "13").Label("nvidia.com/cuda.driver.minor", "0").GPUs(8).Allocatable(corev1.ResourceCPU, "64").Allocatable(corev1.ResourceMemory, "1Ti").Obj())
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	return c
}

// artifactsCluster is a finished Job with results in an in-memory S3 on loopback, whose clock
// is fixed so that every run lists the same last-modified time.
func artifactsCluster(t *testing.T) cmdtest.Cmd {
	store := s3fake.Start(t, s3fake.Options{Bucket: "results", Now: outputNow})
	store.Put("results/train/uid-1/results/model.pth", "0123456789")
	job := fixture.Job("train").Namespace("ml").UID("uid-2").Succeeded(1).Condition(batchv1.JobSuccessCriteriaMet, "", "").Condition(batchv1.JobComplete, "", "").Obj()
	job.UID = "uid-1"
	job.Annotations = map[string]string{s3layout.AnnotationOutputs: `["/results"]`, s3layout.AnnotationS3Secret: s3layout.SecretName("train")}
	return cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(job), Env: store.Env()}
}
