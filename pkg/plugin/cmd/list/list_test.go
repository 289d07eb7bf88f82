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

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// tao is the container of the listed jobs, asking for gpus GPUs ("" for none).
func tao(gpus string) corev1.Container {
	c := corev1.Container{Name: "tao", Image: "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
		Command:   []string{"/bin/bash", "-c", "dino train -e /specs/$${SPEC}.yaml"},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
	if gpus != "" {
		c.Resources.Limits["nvidia.com/gpu"] = resource.MustParse(gpus)
	}
	return c
}

func fixtures() []runtime.Object {
	return []runtime.Object{
		func() *batchv1.Job {
			j := fixture.Job("ddp").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-90 * time.Minute)).Nodes(2).Container(tao("8")).Active(2).Ready(2).Obj()
			j.Spec.Template.Spec.Containers[0].Command = []string{"/bin/bash", "-c", "export NODE_RANK=...; exec \"$@\"", "kubectl-tao", "torchrun", "--nnodes", "$$NNODES", "train.py"}
			return j
		}(),
		fixture.Job("done").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-26*time.Hour)).Nodes(1).Container(tao("1")).Succeeded(1).Condition(batchv1.JobComplete, "", "").Obj(),
		fixture.Job("cpu-only").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-30 * time.Second)).Nodes(1).Container(tao("")).Obj(),
		fixture.Job("oom").Namespace("other").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-3*time.Minute)).Nodes(4).Container(tao("4")).Failed(1).Condition(batchv1.JobFailed, "BackoffLimitExceeded", "").Obj(),
		// Not ours: never listed.
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: "ml"}},
	}
}

func run(ctx context.Context, c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(ctx, args...)
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
			golden.Check(t, tc.golden, r.Stdout)
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
				Items: []batchv1.Job{*fixture.Job("a").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-time.Minute)).Nodes(1).Container(tao("1")).Obj()}}, nil
		}
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []batchv1.Job{*fixture.Job("b").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-time.Minute)).Nodes(1).Container(tao("1")).Obj()}}, nil
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
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "41"}, Items: []batchv1.Job{*fixture.Job("ddp").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-time.Hour)).Nodes(2).Container(tao("8")).Obj()}}, nil
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
		done <- cmdtest.Cmd{NS: "ml", Client: c, Now: now, Stdout: out}.Run(ctx, "list", "--watch").Code
	}()
	w := <-watchers
	if w.opts.ResourceVersion != "41" || w.opts.LabelSelector != "app.kubernetes.io/managed-by=kubectl-tao" {
		t.Errorf("watch options = %+v, want from the list's resourceVersion with the selector", w.opts)
	}
	running := fixture.Job("ddp").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-time.Hour)).Nodes(2).Container(tao("8")).Active(2).Ready(1).Obj()
	running.ResourceVersion = "42"
	w.fw.Modify(running)
	for deadline := time.Now().Add(5 * time.Second); strings.Count(out.String(), "\n") < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after interrupt", code)
	}
	golden.Check(t, "watch.txt", out.String())
}

// A job waiting in a Kueue queue shows the reason in STATUS, as kubectl shows a pod's reason;
// -o json keeps the Job object (status and reason are status's).
func TestListQueuedShowsQueued(t *testing.T) {
	queued := fixture.Job("waiting").Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Label("team", "vision").Created(now.Add(-time.Minute)).Nodes(2).Container(tao("8")).Label("kueue.x-k8s.io/queue-name", "team-a").Suspend(true).Obj()
	r := run(context.Background(), fake.NewClientset(queued), "list")
	want := "NAME      STATUS   GPUS   NODES   AGE\nwaiting   Queued   8x2    0/2     60s\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("got %+v, want stdout\n%s", r, want)
	}
}

// A suspended Job a submit never finished shows IncompleteSubmit in STATUS once it is older
// than the submit grace; a younger one (a submit still running) is plain Pending.
func TestListIncompleteSubmit(t *testing.T) {
	left := func(name string, age time.Duration) *batchv1.Job {
		return fixture.Job(name).Namespace("ml").Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).
			Annotation(jobspec.SubmittingAnnotation, "true").Created(now.Add(-age)).Nodes(2).Container(tao("8")).Suspend(true).Obj()
	}
	r := run(context.Background(), fake.NewClientset(left("killed", 2*time.Minute), left("starting", time.Second)), "list")
	want := "NAME       STATUS             GPUS   NODES   AGE\n" +
		"killed     IncompleteSubmit   8x2    0/2     2m\n" +
		"starting   Pending            8x2    0/2     1s\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("got %+v, want stdout\n%s", r, want)
	}
}

// A watch the server can no longer resume (410 Expired, as after an API server restart) is
// followed by a new list: what changed meanwhile is printed (a Job modified, a Job gone), and
// the watch goes on from the new list's version.
func TestListWatchExpired(t *testing.T) {
	job := func(name, uid, rv string, active int32) batchv1.Job {
		j := fixture.Job(name).Namespace("ml").Label("app.kubernetes.io/managed-by", "kubectl-tao").Created(now.Add(-time.Hour)).Nodes(2).Container(tao("8")).Active(active).Obj()
		j.UID, j.ResourceVersion = types.UID(uid), rv
		return *j
	}
	lists := 0
	c := fake.NewClientset()
	c.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists == 1 {
			return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "41"}, Items: []batchv1.Job{job("ddp", "u1", "40", 0), job("old", "u2", "30", 0), job("same", "u3", "35", 0)}}, nil
		}
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "60"}, Items: []batchv1.Job{job("ddp", "u1", "55", 2), job("same", "u3", "35", 0)}}, nil
	})
	watchers := make(chan *watchRecorder, 2)
	c.PrependWatchReactor("jobs", func(a k8stesting.Action) (bool, watchInterface, error) {
		w := newWatchRecorder(a.(k8stesting.WatchActionImpl).ListOptions)
		watchers <- w
		return true, w.fw, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	out := &testbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- cmdtest.Cmd{NS: "ml", Client: c, Now: now, Stdout: out}.Run(ctx, "list", "--watch").Code
	}()
	w := <-watchers
	w.fw.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 41 (50)"})
	var again *watchRecorder
	select {
	case again = <-watchers:
	case <-time.After(10 * time.Second):
		t.Fatal("no new watch after the expired one")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after interrupt", code)
	}
	if again.opts.ResourceVersion != "60" {
		t.Errorf("the new watch starts from %q, want the new list's 60", again.opts.ResourceVersion)
	}
	rows := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// The header and three rows of the first list, then ddp (changed) and old (gone); same, not
	// changed, is not printed again.
	if len(rows) != 6 || !strings.HasPrefix(rows[4], "ddp ") || !strings.HasPrefix(rows[5], "old ") {
		t.Errorf("list --watch printed:\n%s\nwant the first list, then ddp and old once more", out.String())
	}
}
