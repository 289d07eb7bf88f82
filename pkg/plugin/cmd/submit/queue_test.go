package submit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// withKueue makes c's discovery serve Kueue v0.17's API versions.
func withKueue(c *fake.Clientset) *fake.Clientset {
	for _, v := range []string{"v1beta1", "v1beta2"} {
		c.Resources = append(c.Resources, &metav1.APIResourceList{GroupVersion: kueue.Group + "/" + v,
			APIResources: []metav1.APIResource{{Name: kueue.LocalQueues, Namespaced: true, Kind: "LocalQueue"}}})
	}
	return c
}

// queues is a fake dynamic client holding LocalQueues (v1beta2) in namespace ns.
func queues(ns string, names ...string) *fakedynamic.FakeDynamicClient {
	var objs []runtime.Object
	for _, n := range names {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(kueue.Group + "/v1beta2")
		u.SetKind("LocalQueue")
		u.SetNamespace(ns)
		u.SetName(n)
		objs = append(objs, u)
	}
	kinds := map[schema.GroupVersionResource]string{kueue.GVR("v1beta2"): "LocalQueueList", kueue.GVR("v1beta1"): "LocalQueueList"}
	return fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
}

func TestSubmitQueuedLabelsLastAndStaysSuspended(t *testing.T) {
	c := withKueue(newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj()))
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c, Dynamic: queues("ml", "team-a")},
		"ddp", "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a", "--", "torchrun", "train.py")
	if r.Code != 0 || r.Stdout != "job.batch/ddp created\nservice/ddp created\n" || !strings.Contains(r.Stderr, "queued in LocalQueue team-a: Kueue starts all 2 ranks") {
		t.Fatalf("got %+v", r)
	}
	// The Job is created suspended without the label, the Service next, the label last.
	if got := strings.Join(mutations(c), ","); got != "create jobs,create services,patch jobs" {
		t.Fatalf("mutations = %s", got)
	}
	for _, a := range c.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			if j, ok := a.GetObject().(*batchv1.Job); ok {
				if _, has := j.Labels[jobspec.QueueLabel]; has || j.Spec.Suspend == nil || !*j.Spec.Suspend {
					t.Errorf("created Job: labels %v, suspend %v; want no queue label yet, suspended", j.Labels, j.Spec.Suspend)
				}
			}
		case k8stesting.PatchAction:
			var p struct {
				Metadata struct {
					UID    string            `json:"uid"`
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec map[string]any `json:"spec"`
			}
			if err := json.Unmarshal(a.GetPatch(), &p); err != nil {
				t.Fatal(err)
			}
			if p.Metadata.UID == "" || p.Metadata.Labels[jobspec.QueueLabel] != "team-a" || p.Spec != nil {
				t.Errorf("patch %s: want the UID precondition and the queue label, and no spec change", a.GetPatch())
			}
		}
	}
	job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Labels[jobspec.QueueLabel] != "team-a" || !*job.Spec.Suspend {
		t.Errorf("stored Job: labels %v, suspend %v; want queued and suspended for Kueue to admit", job.Labels, *job.Spec.Suspend)
	}
	if _, has := job.Annotations[jobspec.SubmittingAnnotation]; has {
		t.Errorf("queued Job still marked as a submit in progress: %v", job.Annotations)
	}
}

func TestSubmitQueueRefusedCreatesNothing(t *testing.T) {
	tests := []struct {
		name   string
		client *fake.Clientset
		want   []string
	}{
		{"missing LocalQueue", withKueue(newClient(fixture.GPUNode("n1", 8).Obj())),
			[]string{`no LocalQueue "team-a" in namespace ml`, "LocalQueues there: team-b", "kubectl get localqueues -n ml"}},
		{"Kueue not installed", newClient(fixture.GPUNode("n1", 8).Obj()),
			[]string{"Kueue is not installed", "stay suspended forever"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, cmdtest.Cmd{NS: "ml", Client: tc.client, Dynamic: queues("ml", "team-b")},
				"train", "--image", "img", "--queue", "team-a", "--", "true")
			if r.Code != int(exitcode.NotFound) || r.Stdout != "" {
				t.Fatalf("got %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr %q, want %q", r.Stderr, w)
				}
			}
			if m := mutations(tc.client); len(m) != 0 {
				t.Errorf("refused submit made %v", m)
			}
		})
	}
}

func TestSubmitQueueUnreadableWarnsAndGoesOn(t *testing.T) {
	c := withKueue(newClient(fixture.GPUNode("n1", 8).Obj()))
	dyn := queues("ml")
	dyn.PrependReactor("get", kueue.LocalQueues, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: kueue.Group, Resource: kueue.LocalQueues}, "team-a", errors.New("RBAC"))
	})
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}, "train", "--image", "img", "--queue", "team-a", "--", "true")
	if r.Code != 0 || !strings.Contains(r.Stderr, "Warning: could not check that LocalQueue team-a exists") {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,patch jobs" {
		t.Fatalf("mutations = %s", got)
	}
}

func TestSubmitQueueLabelFailureRollsBack(t *testing.T) {
	c := withKueue(newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj()))
	c.PrependReactor("patch", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("webhook said no")
	})
	r := run(t, cmdtest.Cmd{Client: c, Dynamic: queues("default", "team-a")},
		"ddp", "--image", "img", "--nodes", "2", "--queue", "team-a", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "queueing job.batch/ddp: webhook said no") {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create services,patch jobs,delete services,delete jobs" {
		t.Fatalf("mutations = %s, want a rollback", got)
	}
}

func TestSubmitQueueDryRuns(t *testing.T) {
	// Client: no cluster, the final object (labelled, suspended).
	r := run(t, cmdtest.Cmd{ClientErr: errors.New("no cluster")}, "train", "--image", "img", "--queue", "team-a", "--dry-run=client", "-o", "yaml", "--", "true")
	if r.Code != 0 || !strings.Contains(r.Stdout, "kueue.x-k8s.io/queue-name: team-a") || !strings.Contains(r.Stdout, "suspend: true") {
		t.Fatalf("got %+v", r)
	}
	// Server: the queue is checked, the Job sent labelled and suspended, nothing patched.
	c := withKueue(newClient(fixture.GPUNode("n1", 8).Obj()))
	r = run(t, cmdtest.Cmd{Client: c, Dynamic: queues("default", "team-a")}, "train", "--image", "img", "--queue", "team-a", "--dry-run=server", "-o", "yaml", "--", "true")
	if r.Code != 0 || !strings.Contains(r.Stdout, "kueue.x-k8s.io/queue-name: team-a") || !strings.Contains(r.Stdout, "suspend: true") {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs" {
		t.Fatalf("mutations = %s", got)
	}
}

// A multi-node job without --queue on a cluster with Kueue goes in, with one warning line: no
// queue admits its ranks together. A single-node job, or a cluster without Kueue, hears nothing.
func TestSubmitMultiNodeWithoutQueueWarns(t *testing.T) {
	nodes := func() *fake.Clientset {
		return newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
	}
	const warning = "Warning: Kueue is installed on this cluster but this 2-node job has no --queue"
	for _, tc := range []struct {
		name  string
		c     *fake.Clientset
		nodes string
		warn  bool
	}{
		{"multi-node, Kueue installed", withKueue(nodes()), "2", true},
		{"single node, Kueue installed", withKueue(nodes()), "1", false},
		{"multi-node, no Kueue", nodes(), "2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, cmdtest.Cmd{NS: "ml", Client: tc.c}, "ddp", "--image", "img", "--gpus", "8", "--nodes", tc.nodes, "--", "torchrun", "train.py")
			if r.Code != 0 || !strings.HasPrefix(r.Stdout, "job.batch/ddp created\n") {
				t.Fatalf("got %+v", r)
			}
			if got := strings.Count(r.Stderr, "Warning: Kueue is installed"); got != map[bool]int{true: 1, false: 0}[tc.warn] {
				t.Errorf("stderr has the warning %d times, want it: %v\n%s", got, tc.warn, r.Stderr)
			}
			if tc.warn && !strings.Contains(r.Stderr, warning) {
				t.Errorf("stderr:\n%s\nwant %q", r.Stderr, warning)
			}
		})
	}
}

// With --queue, --priority-class names a Kueue WorkloadPriorityClass: it must exist, and the Job
// carries it as Kueue's label while its pods get no PriorityClass. A missing one is refused
// before anything is created, naming those that exist.
func TestSubmitQueuePriorityClass(t *testing.T) {
	cluster := func() (*fake.Clientset, *fakedynamic.FakeDynamicClient) {
		c := newClient(fixture.GPUNode("n1", 8).Obj(), fixture.GPUNode("n2", 8).Obj())
		return c, cmdtest.Kueue(c,
			cmdtest.KueueObject("LocalQueue", "ml", "team-a", map[string]any{}),
			cmdtest.KueueObject("WorkloadPriorityClass", "", "high", map[string]any{"value": int64(1000)}),
			cmdtest.KueueObject("WorkloadPriorityClass", "", "low", map[string]any{"value": int64(10)}))
	}
	args := func(pc string) []string {
		return []string{"ddp", "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a", "--priority-class", pc, "--", "torchrun", "train.py"}
	}

	c, dyn := cluster()
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}, args("high")...)
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Labels[jobspec.WorkloadPriorityClassLabel] != "high" || job.Spec.Template.Spec.PriorityClassName != "" {
		t.Errorf("labels %v, pod PriorityClass %q; want the Kueue label high and no pod PriorityClass", job.Labels, job.Spec.Template.Spec.PriorityClassName)
	}

	c, dyn = cluster()
	r = run(t, cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}, args("urgent")...)
	if r.Code != int(exitcode.NotFound) || r.Stdout != "" ||
		!strings.Contains(r.Stderr, `--priority-class urgent: there is no Kueue WorkloadPriorityClass "urgent"`) ||
		!strings.Contains(r.Stderr, "WorkloadPriorityClasses: high, low") {
		t.Fatalf("got %+v", r)
	}
	if m := mutations(c); len(m) != 0 {
		t.Errorf("refused submit made %v", m)
	}

	// Without --queue, --priority-class stays the pods' PriorityClass, and Kueue is not asked.
	c = newClient(fixture.GPUNode("n1", 8).Obj())
	r = run(t, cmdtest.Cmd{NS: "ml", Client: c}, "one", "--image", "img", "--gpus", "8", "--priority-class", "urgent", "--", "true")
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, err = c.BatchV1().Jobs("ml").Get(context.Background(), "one", metav1.GetOptions{})
	if err != nil || job.Spec.Template.Spec.PriorityClassName != "urgent" || job.Labels[jobspec.WorkloadPriorityClassLabel] != "" {
		t.Errorf("unqueued job: %v, PriorityClass %q, labels %v", err, job.Spec.Template.Spec.PriorityClassName, job.Labels)
	}

	// Kueue's label as a plain --label is refused: --priority-class with --queue sets it.
	c = newClient()
	r = run(t, cmdtest.Cmd{NS: "ml", Client: c}, "one", "--image", "img", "--label", "kueue.x-k8s.io/priority-class=high", "--", "true")
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "use --priority-class NAME with --queue") || len(c.Actions()) != 0 {
		t.Errorf("got %+v", r)
	}
}
