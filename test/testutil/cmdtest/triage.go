package cmdtest

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// The triage fixtures that replicas' and diagnose's goldens are made of.
var (
	// TriageT0 is when every triage fixture job started.
	TriageT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// TriageNow is the clock of the triage goldens.
	TriageNow = TriageT0.Add(10 * time.Minute)
)

// TriageBackoff is the Failed condition of a job whose rank failed (backoffLimit 0).
var TriageBackoff = batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded",
	Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(TriageT0.Add(3 * time.Minute))}

// MsgNoGPU is the scheduler's message for a pod no node has GPUs for.
const MsgNoGPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: " +
	"4 No preemption victims found for incoming pod."

// TriageJob is a Job of ranks ranks of one container "tao" asking 8 GPUs, started at TriageT0.
func TriageJob(name string, ranks int32) *fixture.JobWrapper {
	return fixture.Job(name).Namespace("ml").Created(TriageT0).Nodes(ranks).DefaultSelector().
		Container(corev1.Container{Name: "tao", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}})
}

// TriagePod is rank rank of j, named as kubectl get shows it in the goldens.
func TriagePod(j *batchv1.Job, rank int) *fixture.PodWrapper {
	return fixture.RankPod(j, rank).Name(fmt.Sprintf("%s-%d-q8x2z", j.Name, rank))
}

// TriageCluster holds the fixtures in namespace ml: a 2-rank job whose rank 1 was OOM-killed
// (rank 0 then died of SIGTERM), a partial start, an image that cannot be pulled, and a job
// that completed.
func TriageCluster() *fake.Clientset {
	t0 := TriageT0
	oom := TriageJob("oom", 2).Conditions(TriageBackoff).Obj()
	half := TriageJob("half", 2).Obj()
	img := TriageJob("img", 1).Obj()
	done := TriageJob("done", 1).Condition(batchv1.JobComplete, "", "").Succeeded(1).Obj()
	objs := []runtime.Object{
		oom,
		TriagePod(oom, 0).Node("gpu-node-0").Exited(143, "Error", t0.Add(2*time.Minute)).Obj(),
		TriagePod(oom, 1).Node("gpu-node-1").Exited(137, "OOMKilled", t0.Add(time.Minute)).Obj(),
		half,
		TriagePod(half, 0).Node("gpu-node-2").Running(t0).Obj(),
		TriagePod(half, 1).Unschedulable(MsgNoGPU, t0.Add(time.Second)).Obj(),
		img,
		TriagePod(img, 0).Node("gpu-node-3").
			Waiting("ImagePullBackOff", `Back-off pulling image "nvcr.io/nvidia/pytorch:25.01-py3": ErrImagePull: unauthorized`).Obj(),
		done,
		TriagePod(done, 0).Node("gpu-node-0").Phase(corev1.PodSucceeded).Obj(),
	}
	return fake.NewClientset(objs...)
}
