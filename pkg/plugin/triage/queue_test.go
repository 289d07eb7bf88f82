package triage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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
			a := Diagnose(Snapshot{Job: tc.job, Events: tc.events, Now: now})
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
	a := Diagnose(Snapshot{Job: admitted, Pods: []corev1.Pod{testPod("ddp", 0, running("gpu-node-0"))}, Now: now})
	if a.FirstFailure != nil || a.Status != "Running" {
		t.Errorf("admitted, running job: %+v", a)
	}
}

func TestReplicasQueuedNote(t *testing.T) {
	reps, notes := Replicas(Snapshot{Job: queuedJob("ddp", "team-a", 2), Now: now})
	if len(reps) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "job ddp is queued in team-a, not admitted yet") {
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
	tests := []struct {
		name   string
		pod    corev1.Pod
		reason string
		want   []string
	}{
		{"GPU taint without value", testPod("t", 0, unschedulable("0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: }. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.")),
			"UntoleratedTaint", []string{"--toleration nvidia.com/gpu:NoSchedule", "unless --no-gpu-toleration", "NoSchedule or NoExecute", "kubectl get nodes -o custom-columns="}},
		{"two taints", testPod("t", 0, unschedulable("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 2 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.")),
			"UntoleratedTaint", []string{"--toleration dedicated=ml:NoSchedule --toleration node-role.kubernetes.io/control-plane:NoSchedule"}},
		{"unbound claim named", testPod("t", 0, unschedulable(msgPVC), func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "r", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "results"}}}}
		}), "PersistentVolumeClaimNotBound", []string{"(results) is not bound", "kubectl get pvc results -n ml", "StorageClass", "--volume mounts existing claims only"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Diagnose(Snapshot{Job: testJob("t", 1), Pods: []corev1.Pod{tc.pod}, Now: now})
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
