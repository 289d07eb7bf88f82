package triage

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// t0 is when the fixtures' jobs start; now is when they are looked at.
var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(10 * time.Minute)
)

// Scheduler messages exactly as kube-scheduler v1.37 writes them.
const (
	msgNoGPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: " +
		"4 No preemption victims found for incoming pod."
	msgNoMatch = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. preemption: " +
		"0/4 nodes are available: 4 Preemption is not helpful for scheduling."
	msgNoSlices = "0/4 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb, 2 node(s) didn't match Pod's node affinity/selector. " +
		"preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
	msgMixed = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node " +
		"affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, " +
		"2 Preemption is not helpful for scheduling."
	msgPVC   = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
	msgTaint = "0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)

// jobOf is the Job of the tests named name, of nodes ranks, created at t0.
func jobOf(name string, nodes int32) *fixture.JobWrapper {
	return fixture.Job(name).Namespace("ml").UID("job-uid-" + name).Created(t0).Nodes(nodes).DefaultSelector()
}

func testJob(name string, nodes int32, conds ...batchv1.JobCondition) *batchv1.Job {
	return jobOf(name, nodes).Conditions(conds...).Obj()
}

func failedCond(reason, msg string, at time.Time) batchv1.JobCondition {
	return batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(at)}
}

// podOf is rank rank of jobOf(job), with one container "tao" asking 8 GPUs.
func podOf(job string, rank int) *fixture.PodWrapper {
	return fixture.RankPod(jobOf(job, 0).Obj(), rank).Container(corev1.Container{
		Name: "tao", Image: "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
	})
}
