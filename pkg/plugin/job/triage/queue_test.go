package triage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func queuedJob(name, queue string, nodes int32) *batchv1.Job {
	return jobOf(name, nodes).Label("kueue.x-k8s.io/queue-name", queue).Suspend(true).Obj()
}

// workloadEvent is the event Kueue writes about the Workload name of a queued Job.
func workloadEvent(name, msg string, after time.Duration) corev1.Event {
	ref := corev1.ObjectReference{Kind: "Workload", APIVersion: "kueue.x-k8s.io/v1beta2", Namespace: "ml", Name: name, UID: "wl-uid"}
	return fixture.Event(ref, "Pending", msg).Name(name + ".pending").Last(t0.Add(after)).Val()
}

func TestDiagnoseQueued(t *testing.T) {
	const quota = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 8 more needed"
	tests := []struct {
		name    string
		job     *batchv1.Job
		events  []corev1.Event
		want    []string
		notWant string
	}{
		{"queued, Kueue silent", queuedJob("ddp", "team-a", 2), nil,
			[]string{"queued in team-a, not admitted yet", "all 2 ranks together"}, "Kueue says"},
		{"queued, Kueue's reason from its Workload event", queuedJob("ddp", "team-a", 2),
			[]corev1.Event{workloadEvent("job-ddp-3f9a1", quota, time.Minute)},
			[]string{"queued in team-a, not admitted yet", "Kueue says: " + quota}, ""},
		{"another job's Workload is not ours", queuedJob("ddp", "team-a", 2),
			[]corev1.Event{workloadEvent("job-ddp-2-3f9a1", quota, time.Minute), workloadEvent("job-ddp2-3f9a1", quota, time.Minute)},
			[]string{"queued in team-a"}, "Kueue says"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Analyze(Snapshot{Job: tc.job, Events: tc.events, Now: now})
			if a.Status != "Pending" || a.Message != "queued in team-a" {
				t.Errorf("status %s %q, want Pending, queued in team-a", a.Status, a.Message)
			}
			f := a.FirstFailure
			if f == nil || f.NodeEventName != "Queued" || f.Rank != -1 || a.ErrClass == nil || *a.ErrClass != ErrInfra {
				t.Fatalf("first failure %+v, class %v; want Queued at rank -1, ERR_INFRA", f, a.ErrClass)
			}
			for _, w := range tc.want {
				if !strings.Contains(f.Message, w) {
					t.Errorf("message %q lacks %q", f.Message, w)
				}
			}
			if tc.notWant != "" && strings.Contains(f.Message, tc.notWant) {
				t.Errorf("message %q has %q", f.Message, tc.notWant)
			}
			for _, w := range []string{"kubectl get workloads -n ml", "kubectl describe localqueue team-a -n ml", "kubectl tao preflight --queue"} {
				if !strings.Contains(a.Suggestion, w) {
					t.Errorf("suggestion %q lacks %q", a.Suggestion, w)
				}
			}
		})
	}
	// Once admitted (resumed), the queue is no longer the story.
	admitted := queuedJob("ddp", "team-a", 1)
	admitted.Spec.Suspend = ptr.To(false)
	a := Analyze(Snapshot{Job: admitted, Pods: []corev1.Pod{podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val()}, Now: now})
	if a.FirstFailure != nil || a.Status != "Running" {
		t.Errorf("admitted, running job: %+v", a)
	}
}

func TestReplicasQueuedNote(t *testing.T) {
	reps, notes := Replicas(Snapshot{Job: queuedJob("ddp", "team-a", 2), Now: now})
	if len(reps) != 0 || len(notes) != 1 || !strings.HasPrefix(notes[0], "queued in team-a, not admitted yet") {
		t.Fatalf("replicas %+v, notes %q", reps, notes)
	}
}

func TestIsWorkloadOf(t *testing.T) {
	long := strings.Repeat("a", 63)
	job := testJob(long, 1)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"job-" + long + "-abcde", true},
		{("job-" + long)[:57] + "-abcde", true}, // ShortWorkloadNames: cut to 63 characters
		{"job-" + long + "-abcdef", false},
		{"jobset-" + long + "-abcde", false},
	} {
		ref := corev1.ObjectReference{Kind: "Workload", APIVersion: "kueue.x-k8s.io/v1beta1", Namespace: "ml", Name: tc.name}
		if got := isWorkloadOf(job, ref); got != tc.want {
			t.Errorf("isWorkloadOf(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	ref := corev1.ObjectReference{Kind: "Workload", APIVersion: "kueue.x-k8s.io/v1beta2", Namespace: "other", Name: "job-" + long + "-abcde"}
	if isWorkloadOf(job, ref) {
		t.Error("a Workload of another namespace matched")
	}
	if got := relevantEvents(queuedJob("ddp", "q", 1), nil, []corev1.Event{workloadEvent("job-ddp-x1y2z", "m", 0), workloadEvent("job-other-x1y2z", "m", 0)}); len(got) != 1 {
		t.Errorf("relevantEvents kept %d Workload events, want 1", len(got))
	}
}

func TestSchedulingFixes(t *testing.T) {
	const modern = "0/4 nodes are available: 4 node(s) had untolerated taint(s). preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
	const mixedTaint = "0/5 nodes are available: 1 node(s) had untolerated taint(s), 4 node(s) didn't match Pod's node affinity/selector. preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
	dedicated := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute}
	gpuTaint := corev1.Taint{Key: string(jobspec.GPUResource), Effect: corev1.TaintEffectNoSchedule}
	controlPlane := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name   string
		pod    corev1.Pod
		nodes  []corev1.Node
		reason string
		want   []string
	}{
		{"modern message: the taint comes from the nodes meant for the pod", podOf("t", 0).Unschedulable(modern, t0.Add(time.Second)).Toleration(corev1.Toleration{Key: string(jobspec.GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}).NodeSelector("pool", "h100").Val(),
			[]corev1.Node{
				fixture.Node("cp").Label("pool", "h100").GPUs(0).Taints(controlPlane).Val(),            // no GPUs: not meant for it
				fixture.Node("other-pool").Label("pool", "a100").GPUs(8).Taints(dedicated).Val(),       // not selected
				fixture.Node("gpu-1").Label("pool", "h100").GPUs(8).Taints(gpuTaint, dedicated).Val(),  // GPU taint tolerated
				fixture.Node("gpu-2").Label("pool", "h100").GPUs(8).Taints(dedicated, dedicated).Val(), // repeats once
			},
			"UntoleratedTaint", []string{"resubmit with --toleration dedicated=ml:NoExecute."}},
		{"modern message, nodes unknown", podOf("t", 0).Unschedulable(modern, t0.Add(time.Second)).Val(), nil,
			"UntoleratedTaint", []string{"--toleration KEY[=VALUE]:EFFECT", "kubectl get nodes -o custom-columns="}},
		{"GPU taint without value", podOf("t", 0).Unschedulable("0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: }. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.", t0.Add(time.Second)).Val(),
			nil, "UntoleratedTaint", []string{"--toleration nvidia.com/gpu:NoSchedule", "unless --no-gpu-toleration", "NoSchedule or NoExecute", "kubectl get nodes -o custom-columns="}},
		{"two taints", podOf("t", 0).Unschedulable("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 2 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.", t0.Add(time.Second)).Val(),
			nil, "UntoleratedTaint", []string{"--toleration dedicated=ml:NoSchedule --toleration node-role.kubernetes.io/control-plane:NoSchedule"}},
		{"selector matches nothing, a tainted node ruled out first: the selector is the fix", podOf("t", 0).NodeSelector("foo", "bar").Unschedulable(mixedTaint, t0.Add(time.Second)).Val(),
			[]corev1.Node{fixture.Node("real-0").Label("pool", "real").GPUs(8).Taints(dedicated).Val()},
			"NoMatchingNode", []string{"kubectl get nodes -l foo=bar"}},
		{"selector matches the tainted node: the toleration is the fix", podOf("t", 0).NodeSelector("pool", "real").Unschedulable(mixedTaint, t0.Add(time.Second)).Val(),
			[]corev1.Node{fixture.Node("real-0").Label("pool", "real").GPUs(8).Taints(dedicated).Val()},
			"UntoleratedTaint", []string{"--toleration dedicated=ml:NoExecute"}},
		{"unbound claim named", podOf("t", 0).Unschedulable(msgPVC, t0.Add(time.Second)).Volume(corev1.Volume{Name: "r", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "results"}}}).Val(), nil, "PersistentVolumeClaimNotBound", []string{"(results) is not bound", "kubectl get pvc results -n ml", "StorageClass", "--volume mounts existing claims only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Analyze(Snapshot{Job: testJob("t", 1), Pods: []corev1.Pod{tc.pod}, Now: now, TaintedNodes: tc.nodes})
			if a.FirstFailure == nil || a.FirstFailure.NodeEventName != tc.reason {
				t.Fatalf("first failure %+v, want %s", a.FirstFailure, tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(a.Suggestion, w) {
					t.Errorf("suggestion %q lacks %q", a.Suggestion, w)
				}
			}
		})
	}
}

func TestNeedsTaints(t *testing.T) {
	taint := podOf("t", 0).Unschedulable("0/4 nodes are available: 4 node(s) had untolerated taint(s).", t0.Add(time.Second)).Val()
	gpu := podOf("t", 0).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val()
	bare := podOf("t", 1).Val()
	if !NeedsTaints([]corev1.Pod{gpu, taint}, nil) || NeedsTaints([]corev1.Pod{gpu}, nil) {
		t.Error("taints are needed exactly when a pod's condition names an untolerated taint")
	}
	if !NeedsTaints([]corev1.Pod{bare}, []corev1.Event{fixture.PodEvent(&bare, "FailedScheduling", msgTaint).Last(t0.Add(time.Second)).Val()}) {
		t.Error("a FailedScheduling event naming a taint needs them too")
	}
}

// What the Workload says names the finding, as status names the reason; the quota says what
// would admit a job waiting for it.
func TestQueuedFindingFromWorkload(t *testing.T) {
	quota := func(used int64, flavors ...jobstatus.FlavorQuota) *jobstatus.QueueState {
		if len(flavors) == 0 {
			flavors = []jobstatus.FlavorQuota{{Flavor: "h100", Nominal: 16, Used: used}}
		}
		return &jobstatus.QueueState{LocalQueue: "team-a", ClusterQueue: "cq", LocalQueuePending: 1, GPUs: 16, Flavors: flavors}
	}
	held := func(stops ...jobstatus.QueueStop) *jobstatus.QueueState {
		q := quota(0)
		q.Stopped = stops
		return q
	}
	inactive := quota(0)
	inactive.Inactive = &jobstatus.QueueInactive{Reason: "FlavorNotFound", Message: "references missing ResourceFlavor(s): gone"}
	tests := []struct {
		name       string
		wl         *jobstatus.Workload
		event      string
		message    []string
		suggestion string
	}{
		{"waiting for quota", &jobstatus.Workload{Pending: "8 more needed", Queue: quota(8)}, "",
			[]string{"queued in team-a, not admitted yet", "ClusterQueue cq: 8 of 16 nvidia.com/gpu used in flavor h100, the job needs 16", "Kueue says: 8 more needed"},
			"It is admitted once 8 more nvidia.com/gpu are free in flavor h100 (8 of 16 used now)"},
		{"the Workload's words win over an older event", &jobstatus.Workload{Pending: "now", Queue: quota(16)}, "earlier",
			[]string{"Kueue says: now"}, "once 16 more nvidia.com/gpu are free in flavor h100"},
		{"room now, behind others", &jobstatus.Workload{Queue: quota(0)}, "",
			[]string{"0 of 16"}, "Flavor h100 has room for it now (0 of 16 used): Kueue admits it in its turn"},
		{"the flavor that needs the least", &jobstatus.Workload{Queue: quota(0,
			jobstatus.FlavorQuota{Flavor: "small", Nominal: 8}, jobstatus.FlavorQuota{Flavor: "a100", Nominal: 32, Used: 24},
			jobstatus.FlavorQuota{Flavor: "h100", Nominal: 16, Used: 12})}, "",
			[]string{"0 of 8 nvidia.com/gpu used in flavor small"}, "once 8 more nvidia.com/gpu are free in flavor a100 (24 of 32 used now)"},
		{"preempted", &jobstatus.Workload{EvictedReason: "Preempted", EvictedMessage: "for a higher priority", Queue: quota(16)}, "",
			[]string{"preempted by Kueue and requeued in team-a", "16 of 16"}, "once 16 more"},
		{"inadmissible, with Kueue's words", &jobstatus.Workload{NeverFits: "needs 16 but at most 8", Pending: "maximum capacity (8)"}, "",
			[]string{"no pods: Kueue can never admit it from team-a: the job needs 16 but at most 8; Kueue says: maximum capacity (8)"},
			"Waiting will not help"},
		{"ClusterQueue stopped: the stop holds it, resuming it admits it", &jobstatus.Workload{Pending: "ClusterQueue cq is stopped", Queue: held(
			jobstatus.QueueStop{Kind: "ClusterQueue", Name: "cq", Policy: "Hold"})}, "",
			[]string{"queued in team-a, not admitted yet: ClusterQueue cq is stopped (Hold): nothing is admitted until an admin resumes it; ClusterQueue cq: 0 of 16",
				"Kueue says: ClusterQueue cq is stopped"},
			`an admin resumes ClusterQueue cq (its spec.stopPolicy is Hold): ` + "`" + `kubectl patch clusterqueue cq --type merge -p '{"spec":{"stopPolicy":"None"}}'` + "`"},
		{"LocalQueue drained", &jobstatus.Workload{Queue: held(jobstatus.QueueStop{Kind: "LocalQueue", Name: "team-a", Policy: "HoldAndDrain"})}, "",
			[]string{"LocalQueue team-a is stopped (HoldAndDrain)"}, `kubectl patch localqueue team-a -n ml --type merge -p '{"spec":{"stopPolicy":"None"}}'`},
		{"preempted, then the queue stopped", &jobstatus.Workload{EvictedReason: "Preempted", Queue: held(jobstatus.QueueStop{Kind: "ClusterQueue", Name: "cq", Policy: "HoldAndDrain"})}, "",
			[]string{"preempted by Kueue and requeued in team-a, not admitted again yet: ClusterQueue cq is stopped (HoldAndDrain)"}, "kubectl patch clusterqueue cq"},
		{"ClusterQueue inactive", &jobstatus.Workload{Queue: inactive}, "",
			[]string{"ClusterQueue cq is inactive (FlavorNotFound: references missing ResourceFlavor(s): gone): nothing is admitted until an admin fixes it"},
			"an admin fixes ClusterQueue cq, which Kueue marks inactive (FlavorNotFound: references missing ResourceFlavor(s): gone; e.g. create the ResourceFlavor"},
		{"deactivated", &jobstatus.Workload{Inactive: true, EvictedMessage: "exceeded the requeue limit"}, "",
			[]string{"no pods: Kueue deactivated it in team-a: exceeded the requeue limit"}, "will not admit it again by itself"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Job: queuedJob("ddp", "team-a", 2), Workload: tc.wl, Now: now}
			if tc.event != "" {
				s.Events = []corev1.Event{workloadEvent("job-ddp-3f9a1", tc.event, time.Minute)}
			}
			f := queuedFinding(&s)
			r := jobstatus.WithWorkload(jobstatus.Result{Status: jobstatus.Pending}, s.Job, tc.wl)
			if f == nil || f.NodeEventName != string(r.Reason) || f.Rank != -1 {
				t.Fatalf("finding %+v, want %s at rank -1", f, r.Reason)
			}
			for _, w := range tc.message {
				if !strings.Contains(f.Message, w) {
					t.Errorf("message %q lacks %q", f.Message, w)
				}
			}
			if !strings.Contains(f.Suggestion, tc.suggestion) {
				t.Errorf("suggestion %q lacks %q", f.Suggestion, tc.suggestion)
			}
			if a := Analyze(s); a.Status != "Pending" || a.Message != r.Message {
				t.Errorf("analysis status %s %q, want Pending %q (as status says)", a.Status, a.Message, r.Message)
			}
		})
	}
}
