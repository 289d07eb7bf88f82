//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type replica struct {
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	Node   string `json:"node"`
	Phase  string `json:"phase"`
	Status struct {
		ReadinessIssue *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"readiness_issue"`
	} `json:"status"`
}

type analysis struct {
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
	Status string   `json:"status"`
	Notes  []string `json:"notes"`
}

// diagnoseUntil polls `diagnose -o json` until done accepts the analysis.
func diagnoseUntil(t *testing.T, ns, job string, done func(analysis) bool) analysis {
	t.Helper()
	var a analysis
	poll(t, 90*time.Second, "diagnose "+job, func(context.Context) (bool, error) {
		r := tao(t, nil, "diagnose", job, "-n", ns, "-o", "json")
		if r.code != 0 {
			t.Fatalf("diagnose: %s", r)
		}
		a = analysis{}
		if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
			t.Fatalf("diagnose -o json: %v\n%s", err, r)
		}
		return done(a), nil
	})
	return a
}

// replicasUntil polls `replicas -o json` until done accepts the entries.
func replicasUntil(t *testing.T, ns, job string, done func([]replica) bool) ([]replica, result) {
	t.Helper()
	var reps []replica
	var last result
	poll(t, 90*time.Second, "replicas "+job, func(context.Context) (bool, error) {
		last = tao(t, nil, "replicas", job, "-n", ns, "-o", "json")
		if last.code != 0 {
			t.Fatalf("replicas: %s", last)
		}
		reps = nil
		if err := json.Unmarshal([]byte(last.stdout), &reps); err != nil {
			t.Fatalf("replicas -o json: %v\n%s", err, last)
		}
		return done(reps), nil
	})
	return reps, last
}

func submit(t *testing.T, ns string, args ...string) {
	t.Helper()
	r := tao(t, nil, append([]string{"submit", "-n", ns, "--image", "nvcr.io/nvidia/pytorch:25.01-py3"}, args...)...)
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
}

func TestDiagnoseOOMKilledRank(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "oom", "--gpus", "8", "--annotation", "sim.kubectl-tao.dev/fate=oom",
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "python train.py")
	a := diagnoseUntil(t, ns, "oom", func(a analysis) bool { return a.ErrClass != nil })
	if *a.ErrClass != "ERR_PROGRAM" || !strings.Contains(a.Suggestion, "Reduce batch size, lower max_length, or request more memory on a larger node") {
		t.Fatalf("class %s, suggestion %q", *a.ErrClass, a.Suggestion)
	}
	e := a.Events[0]
	if e.Name != "OOMKilled" || e.Rank != 0 || !strings.HasPrefix(e.Node, "gpu-node-") || e.ExitCode == nil || *e.ExitCode != 137 || e.Time == "" {
		t.Fatalf("first event = %+v", e)
	}
	r := tao(t, nil, "diagnose", "oom", "-n", ns)
	contains(t, r, 0, "What happened: rank 0: OOMKilled", "Where first:   pod oom-", "on node gpu-node-", "Class: ERR_PROGRAM")
}

func TestDiagnoseImagePullBackOff(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "img", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/fate=image-pull-backoff", "--", "true")
	reps, _ := replicasUntil(t, ns, "img", func(r []replica) bool {
		return len(r) == 1 && r[0].Status.ReadinessIssue != nil && r[0].Status.ReadinessIssue.Reason == "ImagePullBackOff"
	})
	if !strings.Contains(reps[0].Status.ReadinessIssue.Message, `image "nvcr.io/nvidia/pytorch:25.01-py3", no image pull secret set`) {
		t.Fatalf("issue = %+v", *reps[0].Status.ReadinessIssue)
	}
	a := diagnoseUntil(t, ns, "img", func(a analysis) bool { return a.ErrClass != nil })
	if *a.ErrClass != "ERR_INFRA" || a.Events[0].Name != "ImagePullBackOff" || !strings.Contains(a.Suggestion, "--image-pull-secret") {
		t.Fatalf("analysis = %+v", a)
	}
}

func TestDiagnoseMoreGPUsThanAnyNode(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "huge", "--gpus", "16", "--no-capacity-check", "--", "true")
	reps, _ := replicasUntil(t, ns, "huge", func(r []replica) bool { return len(r) == 1 && r[0].Status.ReadinessIssue != nil })
	i := reps[0].Status.ReadinessIssue
	// 4 KWOK nodes lack the GPUs; the real node, when there is one, is ruled out by its taint.
	if i.Reason != "Unschedulable" || !strings.Contains(i.Message, "4 Insufficient nvidia.com/gpu") {
		t.Fatalf("issue = %+v", *i)
	}
	r := tao(t, nil, "replicas", "huge", "-n", ns)
	contains(t, r, 0, "Unschedulable: 0/", "4 Insufficient nvidia.com/gpu")
	a := diagnoseUntil(t, ns, "huge", func(a analysis) bool { return a.ErrClass != nil })
	if *a.ErrClass != "ERR_INFRA" || !strings.Contains(a.Suggestion, "No node has 16 free nvidia.com/gpu") {
		t.Fatalf("analysis = %+v", a)
	}
}

func TestDiagnoseNodeSelectorMatchesNothing(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "sel", "--gpus", "1", "--node-selector", "foo=bar", "--no-capacity-check", "--", "true")
	reps, _ := replicasUntil(t, ns, "sel", func(r []replica) bool { return len(r) == 1 && r[0].Status.ReadinessIssue != nil })
	i := reps[0].Status.ReadinessIssue
	if i.Reason != "NoMatchingNode" || !strings.Contains(i.Message, "no node matches the node selector foo=bar") {
		t.Fatalf("issue = %+v", *i)
	}
	r := tao(t, nil, "diagnose", "sel", "-n", ns)
	contains(t, r, 0, "NoMatchingNode", "kubectl get nodes -l foo=bar")
}

// TestDiagnosePartialStart fills three of the four 8-GPU nodes, then runs a 2 x 8 job: one
// rank runs on the last node, the other cannot be placed.
func TestDiagnosePartialStart(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "filler", "--gpus", "8", "--nodes", "3", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "sleep inf")
	replicasUntil(t, ns, "filler", func(r []replica) bool {
		n := 0
		for _, x := range r {
			if x.Phase == "Running" {
				n++
			}
		}
		return n == 3
	})
	submit(t, ns, "half", "--gpus", "8", "--nodes", "2", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "torchrun train.py")
	_, r := replicasUntil(t, ns, "half", func(r []replica) bool {
		return len(r) == 2 && (r[0].Phase == "Running") != (r[1].Phase == "Running") &&
			(r[0].Status.ReadinessIssue != nil || r[1].Status.ReadinessIssue != nil)
	})
	if !strings.Contains(r.stderr, "partial start: 1 of 2 ranks running, 1 pending") {
		t.Fatalf("no partial start on stderr: %s", r)
	}
	a := diagnoseUntil(t, ns, "half", func(a analysis) bool { return len(a.Notes) > 0 })
	if a.Status != "Running" || !strings.Contains(a.Notes[0], "partial start") || a.ErrClass == nil || *a.ErrClass != "ERR_INFRA" {
		t.Fatalf("analysis = %+v", a)
	}
}

func TestDiagnoseFineJobAndMissingJob(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "ok", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "true")
	diagnoseUntil(t, ns, "ok", func(a analysis) bool { return a.Status == "Complete" && a.ErrClass == nil })
	contains(t, tao(t, nil, "diagnose", "ok", "-n", ns), 0, "is Complete", "No issue found.")
	contains(t, tao(t, nil, "diagnose", "nope", "-n", ns), 3, `job "nope" not found`)
	contains(t, tao(t, nil, "replicas", "nope", "-n", ns), 3, `job "nope" not found`)
}
