package submit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// newClient is a fake clientset that, like the API server, gives created objects a UID.
func newClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	n := 0
	c.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if obj, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && obj.GetUID() == "" {
			n++
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", n)))
		}
		return false, nil, nil
	})
	return c
}

func run(t *testing.T, cluster cmdtest.Cmd, args ...string) cmdtest.Result {
	t.Helper()
	return runEnv(t, cluster, nil, args...)
}

func mutations(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

func TestSubmitSingleNode(t *testing.T) {
	c := newClient(fixture.GPUNode("n1", 8).Obj())
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, "train", "--image", "img", "--gpus", "8", "--", "python train.py")
	if r.Code != 0 || r.Stdout != "job.batch/train created\n" || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Spec.Suspend == nil || *job.Spec.Suspend {
		t.Errorf("job left suspended: %v", job.Spec.Suspend)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,patch jobs" {
		t.Errorf("mutations = %s, want the Job created suspended, then resumed", got)
	}
	// Created marked as a submit in progress; the patch that starts it removes the mark.
	if created := createdJob(t, c); created.Annotations[jobspec.SubmittingAnnotation] != "true" {
		t.Errorf("created Job's annotations = %v, want the in-progress mark", created.Annotations)
	}
	if _, has := job.Annotations[jobspec.SubmittingAnnotation]; has {
		t.Errorf("started Job still marked in progress: %v", job.Annotations)
	}
}

// createdJob is the Job as submit sent it in its create.
func createdJob(t *testing.T, c *fake.Clientset) *batchv1.Job {
	t.Helper()
	for _, a := range c.Actions() {
		if a, ok := a.(k8stesting.CreateAction); ok {
			if j, ok := a.GetObject().(*batchv1.Job); ok {
				return j
			}
		}
	}
	t.Fatal("no Job was created")
	return nil
}

func TestSubmitMultiNodeOwnsItsService(t *testing.T) {
	c := newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--gpus", "8", "--nodes", "2", "--", "torchrun", "train.py")
	if r.Code != 0 || r.Stdout != "job.batch/ddp created\nservice/ddp created\n" || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	job, _ := c.BatchV1().Jobs("default").Get(context.Background(), "ddp", metav1.GetOptions{})
	svc, err := c.CoreV1().Services("default").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refs := svc.OwnerReferences
	if len(refs) != 1 || refs[0].UID != job.UID || refs[0].Kind != "Job" || !*refs[0].BlockOwnerDeletion || !*refs[0].Controller {
		t.Errorf("service owner references = %+v, want the Job (uid %s), blocking", refs, job.UID)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create services,patch jobs" {
		t.Errorf("mutations = %s", got)
	}
}

func TestSubmitFailedServiceCreateLeavesNothing(t *testing.T) {
	c := newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
	c.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "ddp", errors.New("RBAC: denied"))
	})
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--nodes", "2", "--", "true")
	if r.Code != int(exitcode.Forbidden) || r.Stdout != "" || !strings.Contains(r.Stderr, "creating service/ddp") ||
		!strings.Contains(r.Stderr, "nothing was left behind") {
		t.Fatalf("got %+v", r)
	}
	if _, err := c.BatchV1().Jobs("default").Get(context.Background(), "ddp", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Job survived a failed submit: %v", err)
	}
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			o := d.GetDeleteOptions()
			if o.Preconditions == nil || o.Preconditions.UID == nil || *o.PropagationPolicy != metav1.DeletePropagationForeground {
				t.Errorf("rollback delete without UID precondition or foreground: %+v", o)
			}
		}
	}
}

func TestSubmitFailedRollbackIsReported(t *testing.T) {
	c := newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
	c.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("boom")
	})
	c.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("also boom")
	})
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--nodes", "2", "--", "true")
	if r.Code != int(exitcode.Error) || !strings.Contains(r.Stderr, "delete it by hand (kubectl delete job ddp -n default)") {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitCapacityGuard(t *testing.T) {
	tests := []struct {
		name  string
		nodes []runtime.Object
		args  []string
		want  string
	}{
		{"no GPUs at all", nil, []string{"--gpus", "1"}, "No nvidia.com/gpu resources allocatable on the cluster"},
		{"too few", []runtime.Object{fixture.GPUNode("a", 8).Obj()}, []string{"--gpus", "8", "--nodes", "2"}, "needs 16 nvidia.com/gpu (8 per node x 2 nodes) but only 8 are allocatable on the cluster"},
		{"rank spans nodes", []runtime.Object{fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj()}, []string{"--gpus", "16"}, "a rank cannot span nodes"},
		{"a GPU resource no node advertises", []runtime.Object{fixture.GPUNode("a", 8).Obj(), migNode("m")}, []string{"--gpu-resource", "nvidia.com/mig-3g.40gb"},
			"no node of the cluster advertises nvidia.com/mig-3g.40gb; the GPU resources it has are nvidia.com/gpu (8), nvidia.com/mig-1g.10gb (7)"},
		{"more slices than a sliced node has", []runtime.Object{fixture.GPUNode("a", 8).Obj(), migNode("m")}, []string{"--gpus", "8", "--gpu-resource", "nvidia.com/mig-1g.10gb"},
			"the job needs 8 nvidia.com/mig-1g.10gb (8 per node x 1 node) but only 7 are allocatable on the cluster"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(tc.nodes...)
			args := append([]string{"j", "--image", "img"}, tc.args...)
			r := run(t, cmdtest.Cmd{Client: c}, append(args, "--", "true")...)
			if r.Code != int(exitcode.NoCapacity) || r.Stdout != "" || !strings.Contains(r.Stderr, tc.want) {
				t.Fatalf("got %+v, want exit 7 and %q", r, tc.want)
			}
			if m := mutations(c); len(m) != 0 {
				t.Fatalf("refused submit still did %v", m)
			}
		})
	}
	t.Run("skipped with --no-capacity-check and with --gpus 0", func(t *testing.T) {
		for _, flag := range []string{"--no-capacity-check", "--gpus=0"} {
			c := newClient()
			if r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", flag, "--", "true"); r.Code != 0 {
				t.Fatalf("%s: got %+v", flag, r)
			}
		}
	})
}

// migNode is a node of the MIG mixed strategy: 7 slices of 1g.10gb, no whole GPU.
func migNode(name string) *corev1.Node {
	return fixture.GPUNode(name, -1).Allocatable("nvidia.com/mig-1g.10gb", "7").Obj()
}

func TestSubmitGPUResource(t *testing.T) {
	for _, extra := range [][]string{nil, {"--no-capacity-check"}} {
		c := newClient(fixture.GPUNode("a", 8).Obj(), migNode("m"))
		args := append([]string{"j", "--image", "img", "--gpus", "2", "--gpu-resource", "nvidia.com/mig-1g.10gb"}, extra...)
		if r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, append(args, "--", "true")...); r.Code != 0 {
			t.Fatalf("%v: got %+v", args, r)
		}
		job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "j", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		limits := job.Spec.Template.Spec.Containers[0].Resources.Limits
		if q := limits["nvidia.com/mig-1g.10gb"]; q.Value() != 2 || len(limits) != 1 {
			t.Errorf("limits %v, want 2 nvidia.com/mig-1g.10gb only", limits)
		}
		if got := jobspec.GPUResourceOf(job); got != "nvidia.com/mig-1g.10gb" {
			t.Errorf("the Job records GPU resource %q", got)
		}
	}
	// A resource no node has is not checked without the guard: the user said they know better.
	c := newClient(fixture.GPUNode("a", 8).Obj())
	if r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--gpu-resource", "nvidia.com/mig-3g.40gb", "--no-capacity-check", "--", "true"); r.Code != 0 {
		t.Fatalf("--no-capacity-check: got %+v", r)
	}
}

func TestSubmitNodeListForbiddenWarnsAndGoesOn(t *testing.T) {
	c := newClient()
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no"))
	})
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/j created\n" || !strings.Contains(r.Stderr, "Warning: capacity check skipped") {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitPagesThroughNodes(t *testing.T) {
	c := newClient()
	calls := 0
	c.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		opts := a.(k8stesting.ListActionImpl).ListOptions
		if opts.Limit == 0 || opts.Limit > 500 {
			t.Errorf("node list without a page size: %+v", opts)
		}
		list := &corev1.NodeList{Items: []corev1.Node{*fixture.GPUNode(fmt.Sprintf("n%d", calls), 8).Obj()}}
		if calls < 3 {
			list.Continue = fmt.Sprintf("page-%d", calls)
		}
		return true, list, nil
	})
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--gpus", "8", "--nodes", "3", "--", "true")
	if r.Code != 0 || calls != 3 {
		t.Fatalf("got %+v after %d list calls; want success after 3 pages", r, calls)
	}
}

func TestSubmitExistingJobIsUntouched(t *testing.T) {
	existing := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "default", UID: "theirs", Labels: map[string]string{"owner": "someone"}}}
	c := newClient(fixture.GPUNode("a", 8).Obj(), existing)
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--", "true")
	if r.Code != int(exitcode.AlreadyExists) || !strings.Contains(r.Stderr, `job.batch/j already exists in namespace "default"`) {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs" {
		t.Fatalf("mutations = %s, want only the refused create", got)
	}
}

func TestSubmitMissingNamespace(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj())
	c.PrependReactor("create", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "nope")
	})
	r := run(t, cmdtest.Cmd{NS: "nope", Client: c}, "j", "--image", "img", "--", "true")
	if r.Code != int(exitcode.NotFound) || !strings.Contains(r.Stderr, `namespace "nope" not found`) {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitServerDryRunStoresNothing(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--nodes", "2", "--dry-run=server", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/ddp created (server dry run)\nservice/ddp created (server dry run)\n" {
		t.Fatalf("got %+v", r)
	}
	for _, a := range c.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			if d := a.CreateOptions.DryRun; len(d) != 1 || d[0] != metav1.DryRunAll {
				t.Errorf("create %s without DryRunAll", a.Resource.Resource)
			}
			if job, ok := a.Object.(*batchv1.Job); ok && job.Spec.Suspend != nil && *job.Spec.Suspend {
				t.Errorf("server dry run sent a suspended Job")
			}
			if job, ok := a.Object.(*batchv1.Job); ok && job.Annotations[jobspec.SubmittingAnnotation] != "" {
				t.Errorf("server dry run sent the in-progress mark: it shows the Job as it would run")
			}
		case k8stesting.PatchActionImpl, k8stesting.DeleteActionImpl:
			t.Errorf("server dry run did %s", a.GetVerb())
		}
	}
}

func TestSubmitClientDryRunNeedsNoCluster(t *testing.T) {
	f := cmdtest.Cmd{ClientErr: errors.New("must not be called")}
	r := run(t, f, "--image", "img", "--nodes", "2", "--dry-run=client", "-o", "json", "--", "true")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.Stdout)
	}
	if list.Kind != "List" || len(list.Items) != 2 || list.Items[0].Kind != "Job" || list.Items[1].Kind != "Service" ||
		list.Items[0].Metadata.Name != "tao-x7k2p" {
		t.Fatalf("unexpected list: %+v", list)
	}
}

func TestSubmitOutputName(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--nodes", "2", "-o", "name", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/ddp\nservice/ddp\n" {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitOutputJSONPath(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "-o", "jsonpath={.items[0].metadata.uid}", "--", "true")
	if r.Code != 0 || r.Stdout != "uid-1" {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitUsageErrorsTouchNothing(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"j", "--", "true"}, "--image is required"},
		{[]string{"j", "--image", "img"}, `command is required after "--"`},
		{[]string{"j", "k", "--image", "img", "--", "true"}, "expected at most one NAME"},
		{[]string{"j", "--image", "img", "--gpus", "two", "--", "true"}, `invalid argument "two" for "--gpus"`},
		{[]string{"j", "--image", "img", "--gpus", "1.5", "--", "true"}, `invalid argument "1.5" for "--gpus"`},
		{[]string{"j", "--image", "img", "--ttl", "soon", "--", "true"}, `invalid argument "soon" for "--ttl"`},
		{[]string{"j", "--image", "img", "--env", "NOEQUALS", "--", "true"}, `--env "NOEQUALS": expected KEY=VALUE`},
		{[]string{"j", "--image", "img", "--label", "a=1", "--label", "a=2", "--", "true"}, `"a" is given more than once`},
		{[]string{"j", "--image", "img", "-o", "xml", "--", "true"}, `unable to match a printer suitable for the output format "xml"`},
		{[]string{"j", "--image", "img", "--dry-run=maybe", "--", "true"}, `invalid --dry-run value "maybe"`},
		{[]string{"j", "--image", "img", "--bogus", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"Bad", "--image", "img", "--", "true"}, `invalid job name "Bad"`},
		{[]string{"j", "--image", "img", "--retries", "-1", "--", "true"}, "invalid --retries -1"},
		{[]string{"j", "--image", "img", "--retries", "1000", "--", "true"}, "invalid --retries 1000: must be between 0 and 20"},
		{[]string{"j", "--image", "img", "--retries", "some", "--", "true"}, `invalid argument "some" for "--retries"`},
		{[]string{"j", "--image", "img", "--gpu-resource", "amd.com/gpu", "--", "true"}, `invalid --gpu-resource "amd.com/gpu": must be a GPU resource of NVIDIA's device plugin`},
		{[]string{"j", "--image", "img", "--gpu-resource", "nvidia.com/hostdev", "--", "true"}, `invalid --gpu-resource "nvidia.com/hostdev"`},
		{[]string{"j", "--image", "img", "--gpu-resource", "nvidia.com/mig-", "--", "true"}, `invalid --gpu-resource "nvidia.com/mig-"`},
		{[]string{"j", "--image", "img", "--gpu-resource", "", "--gpus", "0", "--gpu-resource", "nvidia.com/mig-1g.10gb", "--", "true"}, "--gpu-resource nvidia.com/mig-1g.10gb needs --gpus of 1 or more"},
		{[]string{"j", "--image", "img", "--gpu-resource", "nvidia.com/mig-1g.10gb", "--resource", "nvidia.com/mig-1g.10gb=1", "--", "true"}, `invalid --resource "nvidia.com/mig-1g.10gb": use --cpu, --memory or --gpus`},
		{[]string{"j", "--image", "img", "--gpu-resource", "nvidia.com/gpu.shared", "--resource", "nvidia.com/gpu=1", "--", "true"}, "a job counts one GPU resource"},
		{[]string{"j", "--image", "img", "--annotation", "kubectl-tao.dev/gpu-resource=nvidia.com/mig-1g.10gb", "--", "true"}, "use --gpu-resource NAME"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c := newClient(fixture.GPUNode("a", 8).Obj())
			r := run(t, cmdtest.Cmd{Client: c}, tc.args...)
			if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, tc.want) ||
				!strings.Contains(r.Stderr, "See 'kubectl tao submit --help' for usage.") {
				t.Fatalf("got %+v, want exit 2 and %q", r, tc.want)
			}
			if len(c.Actions()) != 0 {
				t.Fatalf("usage error still called the API: %v", c.Actions())
			}
		})
	}
}

func TestSubmitNoCluster(t *testing.T) {
	f := cmdtest.Cmd{ClientErr: exitcode.WithCode(exitcode.NoCluster, errors.New("Could not authenticate to a Kubernetes cluster"))}
	r := run(t, f, "j", "--image", "img", "--", "true")
	if r.Code != int(exitcode.NoCluster) || !strings.Contains(r.Stderr, "Could not authenticate") {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitFilesGoInAnOwnedConfigMap(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "train.yaml")
	if err := os.WriteFile(spec, []byte("epochs: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(fixture.GPUNode("a", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "dino", "--image", "img", "--file", spec+":/specs/train.yaml",
		"--volume", "results:/results", "--", "dino train -e /specs/train.yaml")
	if r.Code != 0 || r.Stdout != "job.batch/dino created\nconfigmap/dino-files created\n" {
		t.Fatalf("got %+v", r)
	}
	cm, err := c.CoreV1().ConfigMaps("default").Get(context.Background(), "dino-files", metav1.GetOptions{})
	if err != nil || cm.Data["train.yaml"] != "epochs: 3\n" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "Job" {
		t.Fatalf("configmap %+v, %v", cm, err)
	}
}

func TestSubmitFileErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "secret.yaml")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		filepath.Join(dir, "missing.yaml") + ":/s.yaml": "no such file or directory",
		dir + ":/specs":   "is a directory",
		big + ":/big.bin": "more than the 1048576 a ConfigMap can hold",
		"nocolon":         "expected LOCAL_PATH:CONTAINER_PATH",
	}
	if os.Geteuid() != 0 { // root reads anything
		tests[unreadable+":/s.yaml"] = "permission denied"
	}
	for flag, want := range tests {
		c := newClient(fixture.GPUNode("a", 8).Obj())
		r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--file", flag, "--", "true")
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, want) || len(c.Actions()) != 0 {
			t.Errorf("--file %s: got %+v, want exit 2 and %q with no API call", flag, r, want)
		}
	}
}

func TestSubmitFailedConfigMapCreateLeavesNothing(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(spec, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj())
	c.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--nodes", "2", "--file", spec+":/s.yaml", "--", "true")
	if r.Code != int(exitcode.Error) {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create configmaps,create services,delete configmaps,delete jobs" {
		t.Fatalf("mutations = %s, want the ConfigMap and Job removed newest first", got)
	}
}

func TestSubmitRetriesKeptByTheServer(t *testing.T) {
	c := newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
	r := run(t, cmdtest.Cmd{Client: c}, "ddp", "--image", "img", "--gpus", "8", "--nodes", "2", "--retries", "3", "--", "true")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v, want no warning", r)
	}
	job, err := c.BatchV1().Jobs("default").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Spec.PodFailurePolicy == nil || *job.Spec.BackoffLimitPerIndex != 3 || *job.Spec.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("retries not on the created Job: %+v", job.Spec)
	}
}

// An older API server drops the fields of features it lacks and answers 201 all the same.
func TestSubmitRetriesDroppedByTheServerWarns(t *testing.T) {
	for _, dryRun := range []string{"none", "server"} {
		t.Run(dryRun, func(t *testing.T) {
			c := newClient(fixture.GPUNode("n1", 8).Obj())
			c.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
				job := a.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
				job.Spec.PodReplacementPolicy, job.Spec.PodFailurePolicy = nil, nil
				return false, nil, nil
			})
			r := run(t, cmdtest.Cmd{Client: c}, "train", "--image", "img", "--retries", "2", "--dry-run="+dryRun, "--", "true")
			if r.Code != 0 {
				t.Fatalf("got %+v", r)
			}
			for _, want := range []string{
				"Warning: the API server did not keep spec.podFailurePolicy, spec.podReplacementPolicy of the Job",
				"OOM kills are retried", "may start while the failed one is still terminating",
			} {
				if !strings.Contains(r.Stderr, want) {
					t.Errorf("stderr = %q, want %q", r.Stderr, want)
				}
			}
			if strings.Contains(r.Stdout, "Warning") {
				t.Errorf("warning on stdout: %q", r.Stdout)
			}
		})
	}
}
