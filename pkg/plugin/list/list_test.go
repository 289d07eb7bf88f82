package list_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/internal/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testbuf"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func job(ns, name string, gpus string, nodes int32, age time.Duration, mutate ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Labels:            map[string]string{"app.kubernetes.io/managed-by": "kubectl-tao", "team": "vision"}},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(nodes), Parallelism: ptr.To(nodes),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "tao", Image: "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
				Command:   []string{"/bin/bash", "-c", "dino train -e /specs/$${SPEC}.yaml"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}},
			}}}},
		},
	}
	if gpus != "" {
		j.Spec.Template.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse(gpus)
	}
	for _, m := range mutate {
		m(j)
	}
	return j
}

func fixtures() []runtime.Object {
	return []runtime.Object{
		job("ml", "ddp", "8", 2, 90*time.Minute, func(j *batchv1.Job) {
			j.Status.Active, j.Status.Ready = 2, ptr.To[int32](2)
			j.Spec.Template.Spec.Containers[0].Command = []string{"/bin/bash", "-c", "export NODE_RANK=...; exec \"$@\"", "kubectl-tao", "torchrun", "--nnodes", "$$NNODES", "train.py"}
		}),
		job("ml", "done", "1", 1, 26*time.Hour, func(j *batchv1.Job) {
			j.Status.Succeeded = 1
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}),
		job("ml", "cpu-only", "", 1, 30*time.Second),
		job("other", "oom", "4", 4, 3*time.Minute, func(j *batchv1.Job) {
			j.Status.Failed = 1
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
		}),
		// Not ours: never listed.
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: "ml"}},
	}
}

func run(ctx context.Context, c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{Factory: &cmdutil.FakeFactory{NS: "ml", Client: c}, Now: now}.Run(ctx, args...)
}

func TestListGolden(t *testing.T) {
	tests := []struct{ args, golden string }{
		{"list", "table.txt"},
		{"get", "table.txt"},
		{"list -o wide", "wide.txt"},
		{"list -A", "all-namespaces.txt"},
		{"list --no-headers", "no-headers.txt"},
		{"list -o json", "list.json"},
		{"list -o name", "name.txt"},
		{"list -A -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name,GPU:.spec.template.spec.containers[0].resources.limits.nvidia\\.com/gpu", "custom-columns.txt"},
		{"list -o jsonpath={.items[*].metadata.name}", "jsonpath.txt"},
		{"list --show-labels", "show-labels.txt"},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			r := run(context.Background(), fake.NewClientset(fixtures()...), strings.Fields(tc.args)...)
			if r.Code != 0 || r.Stderr != "" {
				t.Fatalf("got %+v", r)
			}
			cmdtest.Golden(t, tc.golden, r.Stdout)
		})
	}
}

func TestListJSONIsAV1ListOfJobs(t *testing.T) {
	r := run(context.Background(), fake.NewClientset(fixtures()...), "list", "-A", "-o", "json")
	var l struct {
		APIVersion, Kind string
		Items            []struct {
			APIVersion, Kind string
			Metadata         metav1.ObjectMeta
		}
	}
	if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
		t.Fatal(err, r)
	}
	if l.APIVersion != "v1" || l.Kind != "List" || len(l.Items) != 4 {
		t.Fatalf("got %+v", l)
	}
	for _, it := range l.Items {
		if it.APIVersion != "batch/v1" || it.Kind != "Job" {
			t.Errorf("item %s: apiVersion %q kind %q", it.Metadata.Name, it.APIVersion, it.Kind)
		}
	}
}

func TestListSelectorIsANDedWithManagedBy(t *testing.T) {
	c := fake.NewClientset(fixtures()...)
	r := run(context.Background(), c, "list", "-l", "team=vision,stage!=dev")
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	acts := c.Actions()
	if len(acts) != 1 || acts[0].GetVerb() != "list" {
		t.Fatalf("requests = %v, want one list", acts)
	}
	la := acts[0].(k8stesting.ListActionImpl)
	if got := la.ListOptions.LabelSelector; got != "app.kubernetes.io/managed-by=kubectl-tao,stage!=dev,team=vision" {
		t.Errorf("selector = %q", got)
	}
	if la.ListOptions.Limit != 500 {
		t.Errorf("limit = %d, want pages of 500", la.ListOptions.Limit)
	}
	if r := run(context.Background(), c, "list", "-l", "a=(b"); r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "invalid --selector") {
		t.Errorf("bad selector: %+v", r)
	}
}

func TestListPages(t *testing.T) {
	c := fake.NewClientset()
	var continues []string
	c.PrependReactor("list", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		continues = append(continues, opts.Continue)
		if opts.Continue == "" {
			return true, &batchv1.JobList{ListMeta: metav1.ListMeta{Continue: "page2", ResourceVersion: "7"},
				Items: []batchv1.Job{*job("ml", "a", "1", 1, time.Minute)}}, nil
		}
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []batchv1.Job{*job("ml", "b", "1", 1, time.Minute)}}, nil
	})
	r := run(context.Background(), c, "list", "-o", "name")
	if r.Code != 0 || r.Stdout != "job.batch/a\njob.batch/b\n" || strings.Join(continues, ",") != ",page2" {
		t.Fatalf("got %+v, continues %q", r, continues)
	}
}

func TestListEmpty(t *testing.T) {
	r := run(context.Background(), fake.NewClientset(), "list")
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "No resources found in ml namespace.\n" {
		t.Fatalf("got %+v", r)
	}
	r = run(context.Background(), fake.NewClientset(), "list", "-o", "json")
	if r.Code != 0 || r.Stderr != "" || !strings.Contains(r.Stdout, `"items": []`) {
		t.Fatalf("got %+v", r)
	}
}

func TestListBadOutput(t *testing.T) {
	c := fake.NewClientset()
	r := run(context.Background(), c, "list", "-o", "yolo")
	if r.Code != int(exitcode.Usage) || len(c.Actions()) != 0 {
		t.Fatalf("got %+v", r)
	}
	if r := run(context.Background(), c, "list", "extra"); r.Code != int(exitcode.Usage) {
		t.Fatalf("an argument: got %+v", r)
	}
}

func TestListWatch(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "41"}, Items: []batchv1.Job{*job("ml", "ddp", "8", 2, time.Hour)}}, nil
	})
	watchers := make(chan *watchRecorder, 1)
	c.PrependWatchReactor("jobs", func(a k8stesting.Action) (bool, watchInterface, error) {
		w := newWatchRecorder(a.(k8stesting.WatchActionImpl).ListOptions)
		watchers <- w
		return true, w.fw, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	// The test reads stdout while --watch writes it.
	out := &testbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- cmdtest.Cmd{Factory: &cmdutil.FakeFactory{NS: "ml", Client: c}, Now: now, Stdout: out}.Run(ctx, "list", "--watch").Code
	}()
	w := <-watchers
	if w.opts.ResourceVersion != "41" || w.opts.LabelSelector != "app.kubernetes.io/managed-by=kubectl-tao" {
		t.Errorf("watch options = %+v, want from the list's resourceVersion with the selector", w.opts)
	}
	running := job("ml", "ddp", "8", 2, time.Hour, func(j *batchv1.Job) { j.Status.Active, j.Status.Ready = 2, ptr.To[int32](1); j.ResourceVersion = "42" })
	w.fw.Modify(running)
	for deadline := time.Now().Add(5 * time.Second); strings.Count(out.String(), "\n") < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after interrupt", code)
	}
	cmdtest.Golden(t, "watch.txt", out.String())
}

func TestListQueuedIsPending(t *testing.T) {
	queued := job("ml", "waiting", "8", 2, time.Minute, func(j *batchv1.Job) {
		j.Labels["kueue.x-k8s.io/queue-name"] = "team-a"
		j.Spec.Suspend = ptr.To(true)
	})
	r := run(context.Background(), fake.NewClientset(queued), "list")
	want := "NAME      STATUS    GPUS   NODES   AGE\nwaiting   Pending   8x2    0/2     60s\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("got %+v, want stdout\n%s", r, want)
	}
}
