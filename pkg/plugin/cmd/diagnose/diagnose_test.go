package diagnose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(10 * time.Minute)
)

const msgNoGPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: " +
	"4 No preemption victims found for incoming pod."

// job is a Job of ranks ranks of one container "tao" asking 8 GPUs, started at t0.
func job(name string, ranks int32) *fixture.JobWrapper {
	return fixture.Job(name).Namespace("ml").Created(t0).Nodes(ranks).DefaultSelector().
		Container(corev1.Container{Name: "tao", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}})
}

// pod is rank rank of j, named as kubectl get shows it in the goldens.
func pod(j *batchv1.Job, rank int) *fixture.PodWrapper {
	return fixture.RankPod(j, rank).Name(fmt.Sprintf("%s-%d-q8x2z", j.Name, rank))
}

var backoff = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded",
	Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(t0.Add(3 * time.Minute))}

// cluster holds the fixtures: a 2-rank job whose rank 1 was OOM-killed (rank 0 then died of
// SIGTERM), a partial start, an image that cannot be pulled, and a job that completed.
func cluster() *fake.Clientset {
	oom := job("oom", 2).Conditions(backoff).Obj()
	half := job("half", 2).Obj()
	img := job("img", 1).Obj()
	done := job("done", 1).Condition(batchv1.JobComplete, "", "").Succeeded(1).Obj()
	objs := []runtime.Object{
		oom,
		pod(oom, 0).Node("gpu-node-0").Exited(143, "Error", t0.Add(2*time.Minute)).Obj(),
		pod(oom, 1).Node("gpu-node-1").Exited(137, "OOMKilled", t0.Add(time.Minute)).Obj(),
		half,
		pod(half, 0).Node("gpu-node-2").Running(t0).Obj(),
		pod(half, 1).Unschedulable(msgNoGPU, t0.Add(time.Second)).Obj(),
		img,
		pod(img, 0).Node("gpu-node-3").
			Waiting("ImagePullBackOff", `Back-off pulling image "nvcr.io/nvidia/pytorch:25.01-py3": ErrImagePull: unauthorized`).Obj(),
		done,
		pod(done, 0).Node("gpu-node-0").Phase(corev1.PodSucceeded).Obj(),
	}
	return fake.NewClientset(objs...)
}

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(context.Background(), args...)
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
			golden.Check(t, tc.golden, r.Stdout)
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

// A job waiting in a Kueue queue has no pods: replicas and diagnose say why, from its Workload
// and its ClusterQueue's quota (waiting for 8 more GPUs), or that the quota can never hold it.
func TestQueuedGoldens(t *testing.T) {
	pending := map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending",
		"message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"}
	queued := job("train", 2).UID("uid-1").Label("kueue.x-k8s.io/queue-name", "team-a").Suspend(true).Obj()
	for _, tc := range []struct {
		args   []string
		quota  string
		golden string
	}{
		{[]string{"replicas", "train"}, "16", "replicas-queued.txt"},
		{[]string{"diagnose", "train"}, "16", "diagnose-queued.txt"},
		{[]string{"diagnose", "train", "-o", "json"}, "16", "diagnose-queued.json"},
		{[]string{"diagnose", "train"}, "8", "diagnose-inadmissible.txt"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			c, dyn := cmdtest.KueueQueued(queued.DeepCopy(), tc.quota, pending)
			r := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: now}.Run(context.Background(), tc.args...)
			if r.Code != 0 {
				t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
			}
			// replicas has no pods to list: its explanation is the note on stderr.
			golden.Check(t, tc.golden, r.Stdout+"--- stderr\n"+r.Stderr)
		})
	}
}
