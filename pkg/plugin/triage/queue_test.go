package triage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

func queuedJob(name, queue string, nodes int32) *batchv1.Job {
	j := testJob(name, nodes)
	j.Labels = map[string]string{"kueue.x-k8s.io/queue-name": queue}
	j.Spec.Suspend = ptr.To(true)
	return j
}

func workloadEvent(name, msg string, after time.Duration) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + ".pending", Namespace: "ml"},
		InvolvedObject: corev1.ObjectReference{Kind: "Workload", APIVersion: "kueue.x-k8s.io/v1beta2", Namespace: "ml", Name: name, UID: "wl-uid"},
		Type:           corev1.EventTypeWarning, Reason: "Pending", Message: msg, LastTimestamp: metav1.NewTime(t0.Add(after)),
	}
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
			[]string{"queued in team-a, not admitted yet", "all 2 ranks at once"}, "Kueue says"},
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
	a := Analyze(Snapshot{Job: admitted, Pods: []corev1.Pod{testPod("ddp", 0, running("gpu-node-0"))}, Now: now})
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
	gpuNode := func(name string, gpus int64, lbls map[string]string, taints ...corev1.Taint) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute}
	gpuTaint := corev1.Taint{Key: string(jobspec.GPUResource), Effect: corev1.TaintEffectNoSchedule}
	controlPlane := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	wantsGPU := func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "tao", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: resource.MustParse("8")}}}}
		p.Spec.Tolerations = []corev1.Toleration{{Key: string(jobspec.GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.NodeSelector = map[string]string{"pool": "h100"}
	}
	tests := []struct {
		name   string
		pod    corev1.Pod
		nodes  []corev1.Node
		reason string
		want   []string
	}{
		{"modern message: the taint comes from the nodes meant for the pod", testPod("t", 0, unschedulable(modern), wantsGPU),
			[]corev1.Node{
				gpuNode("cp", 0, map[string]string{"pool": "h100"}, controlPlane),            // no GPUs: not meant for it
				gpuNode("other-pool", 8, map[string]string{"pool": "a100"}, dedicated),       // not selected
				gpuNode("gpu-1", 8, map[string]string{"pool": "h100"}, gpuTaint, dedicated),  // GPU taint tolerated
				gpuNode("gpu-2", 8, map[string]string{"pool": "h100"}, dedicated, dedicated), // repeats once
			},
			"UntoleratedTaint", []string{"resubmit with --toleration dedicated=ml:NoExecute."}},
		{"modern message, nodes unknown", testPod("t", 0, unschedulable(modern)), nil,
			"UntoleratedTaint", []string{"--toleration KEY[=VALUE]:EFFECT", "kubectl get nodes -o custom-columns="}},
		{"GPU taint without value", testPod("t", 0, unschedulable("0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: }. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")),
			nil, "UntoleratedTaint", []string{"--toleration nvidia.com/gpu:NoSchedule", "unless --no-gpu-toleration", "NoSchedule or NoExecute", "kubectl get nodes -o custom-columns="}},
		{"two taints", testPod("t", 0, unschedulable("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 2 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.")),
			nil, "UntoleratedTaint", []string{"--toleration dedicated=ml:NoSchedule --toleration node-role.kubernetes.io/control-plane:NoSchedule"}},
		{"unbound claim named", testPod("t", 0, unschedulable(msgPVC), func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "r", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "results"}}}}
		}), nil, "PersistentVolumeClaimNotBound", []string{"(results) is not bound", "kubectl get pvc results -n ml", "StorageClass", "--volume mounts existing claims only"}},
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
	taint := testPod("t", 0, unschedulable("0/4 nodes are available: 4 node(s) had untolerated taint(s)."))
	gpu := testPod("t", 0, unschedulable(msgNoGPU))
	bare := testPod("t", 1)
	if !NeedsTaints([]corev1.Pod{gpu, taint}, nil) || NeedsTaints([]corev1.Pod{gpu}, nil) {
		t.Error("taints are needed exactly when a pod's condition names an untolerated taint")
	}
	if !NeedsTaints([]corev1.Pod{bare}, []corev1.Event{podEvent(bare, "FailedScheduling", msgTaint, time.Second)}) {
		t.Error("a FailedScheduling event naming a taint needs them too")
	}
}
