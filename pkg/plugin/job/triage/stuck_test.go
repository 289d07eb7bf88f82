package triage

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// TestStuckOf covers what makes a job that has not ended unable to start, read from its pods
// alone (no events, nodes or clock: what wait and logs -f have), and what does not.
func TestStuckOf(t *testing.T) {
	pending := jobstatus.Result{Status: jobstatus.Pending}
	running := jobstatus.Result{Status: jobstatus.Running}
	pull := podOf("train", 0).Node("gpu-node-1").Waiting("ImagePullBackOff", `Back-off pulling image "local/nonexistent:1"`)
	tests := []struct {
		name       string
		pods       []corev1.Pod
		result     jobstatus.Result
		want       string // "" for nil, else "rank/reason/others/notAdmitted"
		wantInLine []string
	}{
		{name: "no pods yet", result: pending},
		{name: "running", result: running, pods: []corev1.Pod{podOf("train", 0).Node("n").Running(t0).Val()}},
		{name: "container creating is progress", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("ContainerCreating", "").Val()}},
		{name: "crash loop started: its logs say why", result: running, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("CrashLoopBackOff", "back-off").Val()}},
		{
			name: "image pull back-off", result: pending, pods: []corev1.Pod{pull.Val()},
			want: "0/ImagePullBackOff/0/false", wantInLine: []string{"rank 0 (pod train-0-", "cannot start: ImagePullBackOff: Back-off pulling image", "see why: kubectl tao diagnose train -n ml"},
		},
		{name: "ErrImagePull", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("ErrImagePull", "not found").Val()}, want: "0/ErrImagePull/0/false"},
		{name: "ErrImageNeverPull (pull policy Never)", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("ErrImageNeverPull", `Container image "local/nonexistent:1" is not present with pull policy of Never`).Val()}, want: "0/ErrImageNeverPull/0/false"},
		{name: "InvalidImageName", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("InvalidImageName", "bad").Val()}, want: "0/InvalidImageName/0/false"},
		{name: "missing secret", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("CreateContainerConfigError", `secret "s3" not found`).Val()}, want: "0/CreateContainerConfigError/0/false"},
		{name: "CreateContainerError", result: pending, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("CreateContainerError", "x").Val()}, want: "0/CreateContainerError/0/false"},
		{name: "no GPUs free", result: pending, pods: []corev1.Pod{podOf("train", 0).Unschedulable(msgNoGPU, t0).Val()}, want: "0/Unschedulable/0/false"},
		{
			name: "node selector matches no node", result: pending, pods: []corev1.Pod{podOf("train", 0).NodeSelector("foo", "bar").Unschedulable(msgNoMatch, t0).Val()},
			want: "0/NoMatchingNode/0/false", wantInLine: []string{"NoMatchingNode: no node matches the node selector foo=bar"},
		},
		{name: "untolerated taint", result: pending, pods: []corev1.Pod{podOf("train", 0).Unschedulable(msgTaint, t0).Val()}, want: "0/UntoleratedTaint/0/false"},
		{name: "unbound claim", result: pending, pods: []corev1.Pod{podOf("train", 0).Unschedulable(msgPVC, t0).Val()}, want: "0/PersistentVolumeClaimNotBound/0/false"},
		{
			name: "the lowest stuck rank, and how many more", result: running,
			pods: []corev1.Pod{
				podOf("train", 2).Unschedulable(msgNoGPU, t0).Val(),
				podOf("train", 0).Node("n").Running(t0).Val(),
				podOf("train", 3).Node("n").Waiting("ErrImagePull", "").Val(),
				podOf("train", 1).Unschedulable(msgNoGPU, t0).Val(),
			},
			want: "1/Unschedulable/2/false", wantInLine: []string{"rank 1 (pod train-1-", "(and 2 more ranks)"},
		},
		{name: "a pod on its way out does not count", result: pending, pods: []corev1.Pod{pull.Deleting(t0).Val()}},
		{name: "the job ended", result: jobstatus.Result{Status: jobstatus.Error}, pods: []corev1.Pod{podOf("train", 0).Node("n").Waiting("ImagePullBackOff", "").Val()}},
		{name: "queued in Kueue: waiting for quota is not stuck", result: jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Queued, Message: "queued in q"}},
		{name: "preempted and requeued is not stuck", result: jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Preempted}},
		{
			name: "Kueue can never admit it", result: jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Inadmissible, Message: "LocalQueue q points at ClusterQueue cq, which does not exist"},
			want: "-1/Inadmissible/0/true", wantInLine: []string{"Kueue will not admit the job: Inadmissible: LocalQueue q points at ClusterQueue cq, which does not exist; see why"},
		},
		{name: "Kueue deactivated it", result: jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Deactivated, Message: "exceeded the requeuing limit"}, want: "-1/Deactivated/0/true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob("train", int32(max(1, len(tc.pods))))
			s := StuckOf(job, tc.pods, tc.result)
			got := ""
			if s != nil {
				got = strings.Join([]string{strconv.Itoa(s.Rank), s.Issue.Reason, strconv.Itoa(s.Others), strconv.FormatBool(s.NotAdmitted)}, "/")
			}
			if got != tc.want {
				t.Fatalf("StuckOf = %q, want %q (%+v)", got, tc.want, s)
			}
			for _, frag := range tc.wantInLine {
				if line := s.Line("train", "ml"); !strings.Contains(line, frag) {
					t.Errorf("Line = %q, want it to contain %q", line, frag)
				}
			}
		})
	}
}

// TestStuckSame: a finding is said again when another rank or another reason comes first, not
// when the kubelet's or the scheduler's words change.
func TestStuckSame(t *testing.T) {
	a := &Stuck{Rank: 0, Issue: Issue{Reason: "ImagePullBackOff", Message: "back-off 10s"}}
	tests := []struct {
		b    *Stuck
		want bool
	}{
		{&Stuck{Rank: 0, Issue: Issue{Reason: "ImagePullBackOff", Message: "back-off 20s"}}, true},
		// The kubelet flips between the two at each retry of the pull.
		{&Stuck{Rank: 0, Issue: Issue{Reason: "ErrImagePull"}}, true},
		{&Stuck{Rank: 0, Issue: Issue{Reason: "CreateContainerConfigError"}}, false},
		{&Stuck{Rank: 1, Issue: Issue{Reason: "ImagePullBackOff"}}, false},
		{nil, false},
	}
	for _, tc := range tests {
		if got := a.Same(tc.b); got != tc.want {
			t.Errorf("Same(%+v) = %v, want %v", tc.b, got, tc.want)
		}
	}
	var none *Stuck
	if !none.Same(nil) {
		t.Error("nil.Same(nil) = false")
	}
}
