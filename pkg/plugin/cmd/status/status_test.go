package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// train is the Job whose status the tests read: two ranks of 8 GPUs, one of them ready.
func train() *fixture.JobWrapper {
	return fixture.Job("train").Namespace("ml").UID("uid-1").Created(now.Add(-5 * time.Minute)).Nodes(2).
		Container(corev1.Container{Name: "tao", Image: "img",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}).
		Active(2).Ready(1).Started(now.Add(-4 * time.Minute))
}

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(context.Background(), append([]string{"status"}, args...)...)
}

func requests(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

func TestStatusRunningTable(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Phase(corev1.PodRunning).Obj(), fixture.RankPod(train().Obj(), 1).Name("train-1").Phase(corev1.PodRunning).Obj(),
		fixture.RankPod(train().UID("uid-0").Obj(), 0).Name("old-0").Phase(corev1.PodRunning).Obj())
	r := run(t, c, "job/train")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	golden.Check(t, "running.txt", r.Stdout)
	// Two pods of this Job's UID are Running (the pod of an older same-name Job is not counted).
	if !strings.Contains(r.Stdout, "2/2") {
		t.Errorf("want 2/2 ranks ready from the pods, got\n%s", r.Stdout)
	}
	// Sent together, so in either order.
	if got := strings.Join(requests(c), ","); got != "get jobs,list pods" && got != "list pods,get jobs" {
		t.Errorf("requests = %s, want one get and one pod list", got)
	}
	for _, a := range c.Actions() {
		if list, ok := a.(k8stesting.ListAction); ok {
			if sel := list.GetListRestrictions().Labels.String(); sel != "batch.kubernetes.io/job-name=train" {
				t.Errorf("pod selector = %q", sel)
			}
		}
	}
}

func TestStatusJSONHasExactlyTheContractKeys(t *testing.T) {
	job := train().Obj()
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "PodFailurePolicy", Message: "Container tao exited with 137"}}
	job.Status.Active, job.Status.Failed, job.Status.Ready = 0, 1, ptr.To[int32](0)
	c := fake.NewClientset(job)
	r := run(t, c, "train", "-o", "json")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	golden.Check(t, "error.json", r.Stdout)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"name", "namespace", "uid", "status", "reason", "message", "gpus", "nodes", "nodesRange", "active", "ready", "succeeded", "failed", "startTime", "completionTime", "workdirSHA256", "queue"}
	if len(m) != len(want) {
		t.Errorf("keys = %v, want exactly %v", m, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	if m["status"] != "Error" || m["gpus"] != 8.0 || m["nodes"] != 2.0 {
		t.Errorf("got %v", m)
	}
}

// A job submitted with --workdir names its snapshot, so a user knows which code ran.
func TestStatusJSONNamesTheWorkdirSnapshot(t *testing.T) {
	job := train().Obj()
	sum := strings.Repeat("ab", 32)
	job.Annotations = map[string]string{"kubectl-tao.dev/workdir-sha256": sum}
	r := run(t, fake.NewClientset(job), "train", "-o", "jsonpath={.workdirSHA256}")
	if r.Code != 0 || r.Stdout != sum {
		t.Fatalf("got %+v, want %s", r, sum)
	}
}

func TestStatusFormats(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Phase(corev1.PodRunning).Obj())
	for args, want := range map[string]string{
		"-o jsonpath={.status}": "Running",
		"-o name":               "job.batch/train\n",
	} {
		r := run(t, c, append([]string{"train"}, strings.Fields(args)...)...)
		if r.Code != 0 || r.Stdout != want {
			t.Errorf("%s: got %+v, want %q", args, r, want)
		}
	}
	r := run(t, c, "train", "-o", "yaml")
	if r.Code != 0 || !strings.Contains(r.Stdout, "status: Running\n") || !strings.Contains(r.Stdout, "completionTime: null\n") {
		t.Errorf("yaml: got %+v", r)
	}
	// The table has no extra columns: wide is the table.
	wide := run(t, c, "train", "-o", "wide")
	table := run(t, c, "train")
	if wide.Code != 0 || wide.Stdout != table.Stdout {
		t.Errorf("-o wide: got %+v, want the table %q", wide, table.Stdout)
	}
	r = run(t, c, "train", "-o", "bogus")
	if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, `unable to match a printer suitable for the output format "bogus"`) {
		t.Errorf("bad -o: got %+v", r)
	}
}

func TestStatusMissingJobIsUnknown(t *testing.T) {
	c := fake.NewClientset()
	r := run(t, c, "nope")
	if r.Code != int(exitcode.NotFound) || r.Stdout != "" ||
		r.Stderr != "error: job.batch \"nope\" not found in namespace \"ml\": status Unknown\n" {
		t.Fatalf("got %+v", r)
	}
	r = run(t, c, "nope", "-o", "json")
	var s struct{ Name, Status string }
	if r.Code != int(exitcode.NotFound) || json.Unmarshal([]byte(r.Stdout), &s) != nil || s.Status != "Unknown" || s.Name != "nope" {
		t.Fatalf("got %+v", r)
	}
}

func TestStatusWithoutPodAccessUsesTheJobCounters(t *testing.T) {
	c := fake.NewClientset(train().Obj())
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("denied"))
	})
	r := run(t, c, "train", "-o", "jsonpath={.status} {.ready}")
	if r.Code != 0 || r.Stdout != "Running 1" || !strings.Contains(r.Stderr, "Warning: could not list the pods of job.batch/train") {
		t.Fatalf("got %+v", r)
	}
}

func TestStatusForbiddenJob(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("get", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "train", errors.New("denied"))
	})
	r := run(t, c, "train")
	if r.Code != int(exitcode.Forbidden) || r.Stdout != "" || !strings.Contains(r.Stderr, "reading job.batch/train") {
		t.Fatalf("got %+v", r)
	}
}

func TestStatusArgs(t *testing.T) {
	c := fake.NewClientset()
	for _, args := range [][]string{{}, {"a", "b"}, {"pod/x"}} {
		if r := run(t, c, args...); r.Code != int(exitcode.Usage) {
			t.Errorf("%v: got %+v, want a usage error", args, r)
		}
	}
	if len(c.Actions()) != 0 {
		t.Errorf("usage errors reached the API: %v", requests(c))
	}
}

func TestStatusQueued(t *testing.T) {
	j := train().Obj()
	j.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	j.Spec.Suspend = ptr.To(true)
	j.Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, Reason: "JobSuspended"}}}
	c := fake.NewClientset(j)
	r := run(t, c, "train")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	golden.Check(t, "queued.txt", r.Stdout)
	if !strings.Contains(r.Stdout, "Queued") || !strings.Contains(r.Stdout, "queued in team-a") {
		t.Errorf("want Queued, queued in team-a; got\n%s", r.Stdout)
	}
	// Kueue is looked for (discovery: v1beta2, then v1beta1) only because the job waits in a
	// queue; without it there is nothing more to read.
	reqs := requests(c)
	sort.Strings(reqs)
	if got := strings.Join(reqs, ","); got != "get jobs,get resource,get resource,list pods" {
		t.Errorf("requests = %s", got)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(run(t, c, "train", "-o", "json").Stdout), &m); err != nil {
		t.Fatal(err)
	}
	if m["status"] != "Pending" || m["reason"] != "Queued" {
		t.Errorf("status %v, reason %v; want Pending, Queued", m["status"], m["reason"])
	}
}

// A queued job reads as what Kueue's Workload says: waiting for quota (with Kueue's words),
// preempted, never admissible (from the ClusterQueue's quota, not Kueue's text), deactivated.
func TestStatusKueueReasons(t *testing.T) {
	pending := map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending",
		"message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed"}
	preempted := map[string]any{"type": "Evicted", "status": "True", "reason": "Preempted",
		"message": "Preempted to accommodate a workload due to prioritization in the ClusterQueue"}
	for _, tc := range []struct {
		name       string
		quota      string
		conditions []any
		inactive   bool
		reason     string
		message    string
	}{
		{"waiting for quota", "16", []any{pending}, false, "Queued", "queued in team-a: couldn't assign flavors to pod set main: insufficient unused quota " +
			"for nvidia.com/gpu in flavor h100, 16 more needed; ClusterQueue gpu-cq: 8 of 16 nvidia.com/gpu used in flavor h100, the job needs 16; " +
			"1 pending in team-a, 2 in gpu-cq, 1 admitted"},
		{"preempted", "16", []any{preempted, pending}, false, "Preempted", "preempted and requeued in team-a: Preempted to accommodate a workload due to prioritization in the ClusterQueue; ClusterQueue gpu-cq: 8 of 16"},
		{"never admissible", "8", []any{pending}, false, "Inadmissible", "needs 16 nvidia.com/gpu but ClusterQueue gpu-cq can hold at most 8"},
		{"deactivated", "16", []any{map[string]any{"type": "Evicted", "status": "True", "reason": "DeactivatedDueToRequeuingLimitExceeded",
			"message": "The workload is deactivated due to exceeding the maximum number of re-queuing retries"}}, true,
			"Deactivated", "The workload is deactivated due to exceeding the maximum number of re-queuing retries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := train().Obj()
			j.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
			j.Spec.Suspend = ptr.To(true)
			j.Status = batchv1.JobStatus{}
			c, dyn := cmdtest.KueueQueued(j, tc.quota, tc.conditions...)
			if tc.inactive {
				wl, err := dyn.Resource(cmdtest.KueueGVR("workloads")).Namespace("ml").Get(context.Background(), "job-train-1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_ = unstructured.SetNestedField(wl.Object, false, "spec", "active")
				if _, err := dyn.Resource(cmdtest.KueueGVR("workloads")).Namespace("ml").Update(context.Background(), wl, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			r := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: now}.Run(context.Background(), "status", "train", "-o", "json")
			var m map[string]any
			if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil || r.Code != 0 {
				t.Fatalf("%v: %+v", err, r)
			}
			if m["status"] != "Pending" || m["reason"] != tc.reason || !strings.Contains(m["message"].(string), tc.message) {
				t.Errorf("status %v, reason %v, message %q; want Pending, %s, %q", m["status"], m["reason"], m["message"], tc.reason, tc.message)
			}
			// .queue is where it waits and for what, whatever the reason.
			q, _ := json.Marshal(m["queue"])
			const wantQueue = `{"clusterQueue":"gpu-cq","clusterQueueAdmitted":1,"clusterQueuePending":2,"flavors":[{"borrowingLimit":null,"flavor":"h100","nominal":%s,"used":8}],"gpus":16,"inactive":null,"localQueue":"team-a","localQueuePending":1,"positionInClusterQueue":null,"positionInLocalQueue":null,"stopped":[]}`
			if got, want := string(q), fmt.Sprintf(wantQueue, tc.quota); got != want {
				t.Errorf(".queue = %s\nwant     %s", got, want)
			}
			table := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: now}.Run(context.Background(), "status", "train")
			if !strings.Contains(table.Stdout, "train   "+tc.reason) {
				t.Errorf("table does not show %s in STATUS:\n%s", tc.reason, table.Stdout)
			}
		})
	}
}

// Where Kueue's visibility API is served, a queued job shows its position: 1-based in STATUS
// and the message, 0-based (Kueue's) in .queue.
func TestStatusKueuePosition(t *testing.T) {
	j := train().Obj()
	j.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	j.Spec.Suspend = ptr.To(true)
	j.Status = batchv1.JobStatus{}
	c, dyn := cmdtest.KueueQueued(j, "16", map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "16 more needed"})
	cmdtest.KueueVisibility(c, dyn,
		map[string]any{"metadata": map[string]any{"name": "job-other-1", "namespace": "ml"}, "positionInLocalQueue": int64(0), "positionInClusterQueue": int64(0)},
		map[string]any{"metadata": map[string]any{"name": "job-train-1", "namespace": "ml"}, "positionInLocalQueue": int64(0), "positionInClusterQueue": int64(1)})
	cmd := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: now}
	r := cmd.Run(context.Background(), "status", "train", "-o", "json")
	var m struct {
		Message string
		Queue   map[string]any
	}
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil || r.Code != 0 || r.Stderr != "" {
		t.Fatalf("%v: %+v", err, r)
	}
	if m.Queue["positionInLocalQueue"] != float64(0) || m.Queue["positionInClusterQueue"] != float64(1) {
		t.Errorf(".queue positions = %v, %v; want 0, 1", m.Queue["positionInLocalQueue"], m.Queue["positionInClusterQueue"])
	}
	if want := "; position 1 of 1 pending in team-a, 2 of 2 in gpu-cq, 1 admitted"; !strings.HasSuffix(m.Message, want) {
		t.Errorf("message %q, want it to end %q", m.Message, want)
	}
	table := cmd.Run(context.Background(), "status", "train")
	if !strings.Contains(table.Stdout, "train   Queued:1 ") {
		t.Errorf("table does not show Queued:1 in STATUS:\n%s", table.Stdout)
	}
}

// A Job left suspended by a submit that never finished: -o json keeps one of the six statuses
// (Pending) and says IncompleteSubmit in .reason; the table shows the reason in STATUS, and the
// message names the command that removes it. A younger one is a submit still running.
func TestStatusIncompleteSubmit(t *testing.T) {
	left := func(age time.Duration) *batchv1.Job {
		return fixture.Job("train").Namespace("ml").UID("uid-1").Created(now.Add(-age)).Nodes(2).Suspend(true).
			Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).Annotation(jobspec.SubmittingAnnotation, "true").Obj()
	}
	c := fake.NewClientset(left(3 * time.Minute))
	var m map[string]any
	r := run(t, c, "train", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil || r.Code != 0 {
		t.Fatalf("got %+v (%v)", r, err)
	}
	if m["status"] != "Pending" || m["reason"] != "IncompleteSubmit" || !strings.Contains(m["message"].(string), "kubectl tao delete train -n ml") {
		t.Errorf("status %v, reason %v, message %v; want Pending, IncompleteSubmit and the delete command", m["status"], m["reason"], m["message"])
	}
	r = run(t, c, "train")
	if r.Code != 0 || !strings.Contains(r.Stdout, "train   IncompleteSubmit ") {
		t.Errorf("table:\n%s", r.Stdout)
	}
	r = run(t, fake.NewClientset(left(2*time.Second)), "train", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &m); err != nil || m["status"] != "Pending" || m["reason"] != "" {
		t.Errorf("a submit still running: %s (%v)", r.Stdout, err)
	}
}

// A job with --checkpoint-dir: -o json names the checkpoint a new attempt would resume from,
// read from rank 0's manifest with the credentials at hand; without them the key is absent and
// the status is what it was, with nothing said.
func TestStatusJSONNamesTheLastCheckpoint(t *testing.T) {
	srv := s3fake.Start(t, s3fake.Options{})
	f, err := s3layout.NewManifestFile("results/train/uid-1/", 0, "step-9.pt", 300, now.Add(-90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	data, err := s3layout.EncodeManifest(s3layout.Manifest{Rank: 0, Files: []s3layout.ManifestFile{f}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(s3layout.CheckpointManifestKey("results/train/uid-1/", 0), string(data))
	job := train().Annotation(s3layout.AnnotationCheckpoints, `{"dir":"/ckpt"}`).Annotation(s3layout.AnnotationS3Secret, "train-s3").Obj()

	r := cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(job), Now: now, Env: srv.Env()}.Run(context.Background(), "status", "train", "-o", "json")
	var got struct {
		LastCheckpoint *struct {
			Path       string    `json:"path"`
			Size       int64     `json:"size"`
			Written    time.Time `json:"written"`
			AgeSeconds int64     `json:"ageSeconds"`
		} `json:"lastCheckpoint"`
	}
	if r.Code != 0 || r.Stderr != "" || json.Unmarshal([]byte(r.Stdout), &got) != nil || got.LastCheckpoint == nil ||
		got.LastCheckpoint.Path != "step-9.pt" || got.LastCheckpoint.Size != 300 || got.LastCheckpoint.AgeSeconds != 90 {
		t.Fatalf("got %+v: %+v", got.LastCheckpoint, r)
	}

	// No credentials in the shell, and the job's Secret is not there: no key, no error.
	r = cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(job), Now: now}.Run(context.Background(), "status", "train", "-o", "json")
	if r.Code != 0 || r.Stderr != "" || strings.Contains(r.Stdout, "lastCheckpoint") {
		t.Errorf("without credentials: %+v", r)
	}
}
