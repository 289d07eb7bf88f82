package triage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

const oomSuggestion = "Container OOM-killed. Reduce batch size, lower max_length, or request more memory on a larger node."

func TestDiagnose(t *testing.T) {
	backoff := failedCond("BackoffLimitExceeded", "Job has reached the specified backoff limit", t0.Add(3*time.Minute))
	tests := []struct {
		name      string
		job       *batchv1.Job
		pods      []corev1.Pod
		events    func(pods []corev1.Pod) []corev1.Event
		logs      map[string][]string
		nodes     []*corev1.Node
		wantClass string // "" means null
		wantFirst string // node_event_name of the first failure
		wantRank  int
		wantExit  int32 // 0: not checked
		wantSugg  string
		wantMsg   string
	}{
		{
			name: "complete job is fine", job: testJob("ok", 2, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}),
			pods: []corev1.Pod{podOf("ok", 0).Node("a").Succeeded(t0.Add(5 * time.Minute)).Val(), podOf("ok", 1).Node("b").Succeeded(t0.Add(5 * time.Minute)).Val()},
		},
		{
			name: "healthy running job is fine", job: testJob("ok", 2),
			pods: []corev1.Pod{podOf("ok", 0).Node("a").Running(t0.Add(time.Minute)).Val(), podOf("ok", 1).Node("b").Running(t0.Add(time.Minute)).Val()},
		},
		{
			name: "OOMKilled rank is the program's, with the contract's suggestion", job: testJob("ddp", 2, backoff),
			pods: []corev1.Pod{
				podOf("ddp", 0).Node("gpu-node-0").Exited(143, "Error", t0.Add(2*time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(137, "OOMKilled", t0.Add(time.Minute)).Val(),
			},
			wantClass: ErrProgram, wantFirst: "OOMKilled", wantRank: 1, wantExit: 137, wantSugg: oomSuggestion,
		},
		{
			name: "segfault named by its signal", job: testJob("train", 1, backoff),
			pods:      []corev1.Pod{podOf("train", 0).Node("gpu-node-0").Exited(139, "Error", t0.Add(time.Minute)).Val()},
			wantClass: ErrProgram, wantFirst: "Error", wantExit: 139, wantMsg: "exit code 139 (SIGSEGV)", wantSugg: "crashed (SIGSEGV)",
		},
		{
			name: "exit 1 shows the last log line", job: testJob("train", 1, backoff),
			pods:      []corev1.Pod{podOf("train", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(time.Minute)).Val()},
			logs:      map[string][]string{"train-0-abcde": {"step 1", "ValueError: bad spec: epochs must be > 0", ""}},
			wantClass: ErrProgram, wantFirst: "Error", wantExit: 1, wantMsg: "last log line: ValueError: bad spec", wantSugg: "kubectl tao logs train --rank 0",
		},
		{
			name: "CUDA out of memory in the last log lines", job: testJob("train", 1, backoff),
			pods: []corev1.Pod{podOf("train", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(time.Minute)).Val()},
			logs: map[string][]string{"train-0-abcde": {
				"Traceback (most recent call last):",
				"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB",
			}},
			wantClass: ErrProgram, wantFirst: "CUDAOutOfMemory", wantExit: 1, wantMsg: "CUDA out of memory. Tried to allocate", wantSugg: "Reduce batch size",
		},
		{
			name: "NCCL error in the last log lines", job: testJob("ddp", 2, backoff),
			pods: []corev1.Pod{podOf("ddp", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(time.Minute)).Val()},
			logs: map[string][]string{"ddp-0-abcde": {
				"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error",
			}},
			wantClass: ErrProgram, wantFirst: "NCCLError", wantMsg: "NCCL error in", wantSugg: "NCCL_SOCKET_IFNAME",
		},
		{
			name: "image pull is the infrastructure's", job: testJob("train", 1),
			pods:      []corev1.Pod{podOf("train", 0).Node("gpu-node-0").Waiting("ImagePullBackOff", `Back-off pulling image "nope:latest"`).Val()},
			wantClass: ErrInfra, wantFirst: "ImagePullBackOff", wantSugg: "--image-pull-secret",
		},
		{
			name: "unschedulable: insufficient GPUs", job: testJob("big", 1),
			pods:      []corev1.Pod{podOf("big", 0).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val()},
			wantClass: ErrInfra, wantFirst: "Unschedulable", wantMsg: "4 Insufficient nvidia.com/gpu", wantSugg: "No node has 8 free nvidia.com/gpu",
		},
		{
			name: "unschedulable: insufficient MIG slices", job: testJob("slices", 1),
			pods: []corev1.Pod{func() corev1.Pod {
				p := podOf("slices", 0).Unschedulable(msgNoSlices, t0.Add(time.Second)).Val()
				p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("3")}
				return p
			}()},
			wantClass: ErrInfra, wantFirst: "Unschedulable", wantMsg: "2 Insufficient nvidia.com/mig-1g.10gb", wantSugg: "No node has 3 free nvidia.com/mig-1g.10gb",
		},
		{
			name: "node selector matches nothing", job: testJob("sel", 1),
			pods:      []corev1.Pod{podOf("sel", 0).NodeSelector("foo", "bar").Unschedulable(msgNoMatch, t0.Add(time.Second)).Val()},
			wantClass: ErrInfra, wantFirst: "NoMatchingNode", wantMsg: "no node matches the node selector foo=bar", wantSugg: "kubectl get nodes -l foo=bar",
		},
		{
			name: "preemption first, then a peer's NCCL failure: the root is infra", job: testJob("ddp", 2, backoff),
			pods: []corev1.Pod{
				podOf("ddp", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(4*time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(143, "Error", t0.Add(2*time.Minute)).Disrupted("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod", t0.Add(90*time.Second)).Val(),
			},
			logs:      map[string][]string{"ddp-0-abcde": {"[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12)"}},
			wantClass: ErrInfra, wantFirst: "Preempted", wantRank: 1, wantExit: 143, wantSugg: "PriorityClass",
		},
		{
			name: "node lost (taint manager)", job: testJob("ddp", 1, backoff),
			pods:      []corev1.Pod{podOf("ddp", 0).Node("gpu-node-2").Exited(143, "Error", t0.Add(2*time.Minute)).Disrupted("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint", t0.Add(time.Minute)).Val()},
			wantClass: ErrInfra, wantFirst: "NodeLost", wantSugg: "gpu-node-2",
		},
		{
			name: "evicted", job: testJob("train", 1, backoff),
			pods: []corev1.Pod{func() corev1.Pod {
				p := podOf("train", 0).Node("gpu-node-3").Val()
				p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: ephemeral-storage."
				return p
			}()},
			wantClass: ErrInfra, wantFirst: "Evicted", wantSugg: "ran short of memory or disk",
		},
		{
			name:      "deadline exceeded is the root even though ranks died of SIGTERM",
			job:       testJob("slow", 1, failedCond("DeadlineExceeded", "Job was active longer than specified deadline", t0.Add(5*time.Minute))),
			pods:      []corev1.Pod{podOf("slow", 0).Node("gpu-node-0").Exited(143, "Error", t0.Add(4*time.Minute)).Val()},
			wantClass: ErrInfra, wantFirst: "DeadlineExceeded", wantRank: -1, wantSugg: "activeDeadlineSeconds",
		},
		{
			name: "failed job whose pods are gone", job: testJob("gone", 1, backoff),
			wantClass: ErrProgram, wantSugg: "pods are gone",
		},
		{
			name: "node NotReady under a running rank", job: testJob("ddp", 2),
			pods:      []corev1.Pod{podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val(), podOf("ddp", 1).Node("gpu-node-1").Running(t0.Add(time.Minute)).NotReady().Val()},
			nodes:     []*corev1.Node{fixture.Node("gpu-node-1").Ready(corev1.ConditionUnknown, "Kubelet stopped posting node status.", t0.Add(2*time.Minute)).Obj()},
			wantClass: ErrInfra, wantFirst: "NodeNotReady", wantRank: 1, wantSugg: "cordon",
		},
		{
			name: "missing secret", job: testJob("train", 1),
			pods:      []corev1.Pod{podOf("train", 0).Node("gpu-node-0").Waiting("CreateContainerConfigError", `secret "s3" not found`).Val()},
			wantClass: ErrInfra, wantFirst: "CreateContainerConfigError", wantSugg: "--env-from-secret",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Job: tc.job, Pods: tc.pods, Logs: tc.logs, Now: now, Nodes: map[string]*corev1.Node{}}
			if tc.events != nil {
				s.Events = tc.events(tc.pods)
			}
			for _, n := range tc.nodes {
				s.Nodes[n.Name] = n
			}
			a := Analyze(s)
			if a.JobFailureByNodeEvent == nil || a.Notes == nil {
				t.Fatal("lists must be [] rather than null in JSON")
			}
			if tc.wantClass == "" {
				if a.ErrClass != nil || len(a.JobFailureByNodeEvent) != 0 || a.FirstFailure != nil {
					t.Fatalf("want no issue, got class %v, events %+v", a.ErrClass, a.JobFailureByNodeEvent)
				}
				return
			}
			if a.ErrClass == nil || *a.ErrClass != tc.wantClass {
				t.Fatalf("err_class = %v, want %s (events %+v)", a.ErrClass, tc.wantClass, a.JobFailureByNodeEvent)
			}
			if !strings.Contains(a.Suggestion, tc.wantSugg) {
				t.Errorf("suggestion = %q, want it to contain %q", a.Suggestion, tc.wantSugg)
			}
			if tc.wantFirst == "" {
				return
			}
			f := a.FirstFailure
			if f == nil || f.NodeEventName != tc.wantFirst || f.Rank != tc.wantRank {
				t.Fatalf("first failure = %+v, want %s at rank %d", f, tc.wantFirst, tc.wantRank)
			}
			if tc.wantExit != 0 && (f.ExitCode == nil || *f.ExitCode != tc.wantExit) {
				t.Errorf("exit code = %v, want %d", f.ExitCode, tc.wantExit)
			}
			if !strings.Contains(f.Message, tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", f.Message, tc.wantMsg)
			}
			if a.JobFailureByNodeEvent[0].NodeEventName != tc.wantFirst {
				t.Errorf("events are not in time order: %+v", a.JobFailureByNodeEvent)
			}
		})
	}
}

func TestDiagnoseReportsJobFailureAndPartialStart(t *testing.T) {
	a := Analyze(Snapshot{Job: testJob("ddp", 2), Now: now, Pods: []corev1.Pod{
		podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val(), podOf("ddp", 1).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val(),
	}})
	if a.Status != "Running" || len(a.Notes) != 1 || !strings.Contains(a.Notes[0], "partial start: 1 of 2 ranks running") {
		t.Errorf("status %s, notes %q", a.Status, a.Notes)
	}
	b := Analyze(Snapshot{Job: testJob("t", 1, failedCond("BackoffLimitExceeded", "Job has reached the specified backoff limit", t0)), Now: now})
	if b.JobFailure != "BackoffLimitExceeded: Job has reached the specified backoff limit" || b.Status != "Error" {
		t.Errorf("job failure = %q, status %s", b.JobFailure, b.Status)
	}
}

func TestNeedsNodeAndLogs(t *testing.T) {
	if NeedsNode(podOf("t", 0).Node("a").Running(t0.Add(time.Minute)).Obj()) {
		t.Error("a healthy running pod needs no node read")
	}
	if !NeedsNode(podOf("t", 0).Node("a").Running(t0.Add(time.Minute)).NotReady().Obj()) || !NeedsNode(podOf("t", 0).Node("a").Running(t0.Add(time.Minute)).Deleting(now).Obj()) {
		t.Error("a not-ready or terminating pod needs its node")
	}
	if NeedsNode(podOf("t", 0).Unschedulable(msgNoGPU, t0.Add(time.Second)).Obj()) {
		t.Error("an unscheduled pod has no node to read")
	}
	pods := []corev1.Pod{
		podOf("t", 0).Node("a").Exited(143, "Error", t0.Add(3*time.Minute)).Val(),
		podOf("t", 1).Node("b").Exited(1, "Error", t0.Add(2*time.Minute)).Val(),
		podOf("t", 2).Node("c").Exited(137, "OOMKilled", t0.Add(time.Minute)).Val(),
	}
	if got := NeedsLogs(pods); got != "t-1-abcde" {
		t.Errorf("NeedsLogs = %q, want the earliest non-OOM failure t-1-abcde", got)
	}
	if got := NeedsLogs(pods[2:]); got != "" {
		t.Errorf("NeedsLogs(OOM only) = %q, want none: the OOM says it all", got)
	}
}
