package diagnose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/internal/cmdtest"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(10 * time.Minute)
)

const msgNoGPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: " +
	"4 No preemption victims found for incoming pod."

func job(name string, ranks int32, conds ...batchv1.JobCondition) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(ranks), Completions: ptr.To(ranks),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "uid-" + name}}},
		Status: batchv1.JobStatus{Conditions: conds},
	}
}

func pod(j string, rank int, mutate func(*corev1.Pod)) *corev1.Pod {
	name := fmt.Sprintf("%s-%d-q8x2z", j, rank)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0),
			Labels: map[string]string{batchv1.ControllerUidLabel: "uid-" + j, batchv1.JobNameLabel: j,
				batchv1.JobCompletionIndexAnnotation: strconv.Itoa(rank)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "tao", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	mutate(p)
	return p
}

func runningOn(node string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName, p.Status.Phase = node, corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}}
	}
}

func exitedOn(node string, code int32, reason string, after time.Duration) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeName, p.Status.Phase = node, corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(t0.Add(after))}}}}
	}
}

func unschedulable(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: msgNoGPU, LastTransitionTime: metav1.NewTime(t0.Add(time.Second))}}
}

func succeededOn(node string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeName, p.Status.Phase = node, corev1.PodSucceeded }
}

var backoff = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded",
	Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(t0.Add(3 * time.Minute))}

// cluster holds the fixtures: a 2-rank job whose rank 1 was OOM-killed (rank 0 then died of
// SIGTERM), a partial start, an image that cannot be pulled, and a job that completed.
func cluster() *fake.Clientset {
	objs := []runtime.Object{
		job("oom", 2, backoff),
		pod("oom", 0, exitedOn("gpu-node-0", 143, "Error", 2*time.Minute)),
		pod("oom", 1, exitedOn("gpu-node-1", 137, "OOMKilled", time.Minute)),
		job("half", 2),
		pod("half", 0, runningOn("gpu-node-2")),
		pod("half", 1, unschedulable),
		job("img", 1),
		pod("img", 0, func(p *corev1.Pod) {
			p.Spec.NodeName = "gpu-node-3"
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ImagePullBackOff", Message: `Back-off pulling image "nvcr.io/nvidia/pytorch:25.01-py3": ErrImagePull: unauthorized`}}}}
		}),
		func() *batchv1.Job {
			j := job("done", 1, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
			j.Status.Succeeded = 1
			return j
		}(),
		pod("done", 0, succeededOn("gpu-node-0")),
	}
	return fake.NewClientset(objs...)
}

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{Factory: &cmdutil.FakeFactory{NS: "ml", Client: c}, Now: now}.Run(context.Background(), args...)
}

func TestGoldens(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		golden     string
		wantStderr string
	}{
		{[]string{"replicas", "half"}, "replicas-partial.txt", "Warning: job half: partial start: 1 of 2 ranks running, 1 pending (rank 1 (Unschedulable))"},
		{[]string{"replicas", "half", "-o", "json"}, "replicas-partial.json", "partial start"},
		{[]string{"replicas", "half", "-o", "yaml"}, "replicas-partial.yaml", "partial start"},
		{[]string{"replicas", "job/img"}, "replicas-image.txt", ""},
		{[]string{"replicas", "oom", "-o", "name"}, "replicas-oom.name", ""},
		{[]string{"diagnose", "oom"}, "diagnose-oom.txt", ""},
		{[]string{"diagnose", "oom", "-o", "json"}, "diagnose-oom.json", ""},
		{[]string{"diagnose", "img"}, "diagnose-image.txt", ""},
		{[]string{"diagnose", "half"}, "diagnose-partial.txt", ""},
		{[]string{"diagnose", "done"}, "diagnose-complete.txt", ""},
		{[]string{"diagnose", "done", "-o", "json"}, "diagnose-complete.json", ""},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, cluster(), tc.args...)
			if r.Code != 0 {
				t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, tc.wantStderr) || (tc.wantStderr == "" && r.Stderr != "") {
				t.Errorf("stderr = %q, want %q", r.Stderr, tc.wantStderr)
			}
			cmdtest.Golden(t, tc.golden, r.Stdout)
		})
	}
}

// TestReplicasJSONIsTheSDKShape checks the exact keys a script written for the SDK reads.
func TestReplicasJSONIsTheSDKShape(t *testing.T) {
	r := run(t, cluster(), "replicas", "half", "-o", "json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, r.Stdout)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries", len(got))
	}
	for _, e := range got {
		var keys []string
		for k := range e {
			keys = append(keys, k)
		}
		if len(keys) != 5 || e["name"] == nil || e["rank"] == nil || e["phase"] == nil || e["status"] == nil {
			t.Errorf("entry keys = %v, want exactly name, rank, node, phase, status", keys)
		}
	}
	if got[0]["status"].(map[string]any)["readiness_issue"] != nil {
		t.Errorf("the running rank has an issue: %v", got[0])
	}
	issue := got[1]["status"].(map[string]any)["readiness_issue"].(map[string]any)
	if issue["reason"] != "Unschedulable" || issue["message"] != msgNoGPU {
		t.Errorf("rank 1 issue = %v", issue)
	}
}

func TestDiagnoseJSONIsTheSDKShape(t *testing.T) {
	r := run(t, cluster(), "diagnose", "oom", "-o", "json")
	var got struct {
		ErrClass   *string `json:"err_class"`
		Suggestion string  `json:"suggestion"`
		Events     []struct {
			Name     string `json:"node_event_name"`
			Node     string `json:"node"`
			Pod      string `json:"pod"`
			Rank     int    `json:"rank"`
			ExitCode *int   `json:"exit_code"`
			Message  string `json:"message"`
			Time     string `json:"time"`
		} `json:"job_failure_by_node_event"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.ErrClass == nil || *got.ErrClass != "ERR_PROGRAM" || !strings.HasPrefix(got.Suggestion, "Container OOM-killed. Reduce batch size") {
		t.Errorf("class %v, suggestion %q", got.ErrClass, got.Suggestion)
	}
	e := got.Events[0]
	if e.Name != "OOMKilled" || e.Node != "gpu-node-1" || e.Rank != 1 || e.ExitCode == nil || *e.ExitCode != 137 || e.Time != "2026-03-01T12:01:00Z" {
		t.Errorf("first event = %+v", e)
	}

	r = run(t, cluster(), "diagnose", "done", "-o", "jsonpath={.err_class}")
	if r.Code != 0 || r.Stdout != "null" {
		t.Errorf("jsonpath on a fine job = %q (exit %d)", r.Stdout, r.Code)
	}
}

func TestJobNotFound(t *testing.T) {
	for _, cmd := range []string{"replicas", "diagnose"} {
		r := run(t, cluster(), cmd, "nope")
		if r.Code != int(exitcode.NotFound) || r.Stdout != "" || !strings.Contains(r.Stderr, `error: job "nope" not found in namespace "ml"`) {
			t.Errorf("%s nope: %+v", cmd, r)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"replicas"}, {"diagnose", "a", "b"}, {"diagnose", "pod/x"}, {"diagnose", "oom", "-o", "wide"}, {"diagnose", "oom", "-o", "bogus"},
	} {
		r := run(t, fake.NewClientset(), args...)
		if r.Code != int(exitcode.Usage) || r.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error", args, r.Code, r.Stdout, r.Stderr)
		}
	}
}
