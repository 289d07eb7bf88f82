package triage

import (
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	msgMixed = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node " +
		"affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, " +
		"2 Preemption is not helpful for scheduling."
	msgPVC   = "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
	msgTaint = "0/4 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)

func testJob(name string, nodes int32, conds ...batchv1.JobCondition) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("job-uid-" + name),
			CreationTimestamp: metav1.NewTime(t0)},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(nodes), Completions: ptr.To(nodes),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "job-uid-" + name}},
		},
		Status: batchv1.JobStatus{Conditions: conds},
	}
}

func failedCond(reason, msg string, at time.Time) batchv1.JobCondition {
	return batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(at)}
}

type podOpt func(*corev1.Pod)

// testPod is rank `rank` of job `job`, created at t0, with one container "tao" asking 8 GPUs.
func testPod(job string, rank int, opts ...podOpt) corev1.Pod {
	name := fmt.Sprintf("%s-%d-abcde", job, rank)
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ml", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0),
			Labels: map[string]string{
				batchv1.JobNameLabel: job, batchv1.ControllerUidLabel: "job-uid-" + job,
				batchv1.JobCompletionIndexAnnotation: strconv.Itoa(rank),
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "tao", Image: "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func on(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func running(node string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(time.Minute))}}}}
	}
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	p.Status.ContainerStatuses[0].Ready = false
}

func succeeded(node string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.NewTime(t0.Add(5 * time.Minute))}}}}
	}
}

// exited is a pod that failed with code and reason at t0+after.
func exited(node string, code int32, reason string, after time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodFailed"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: metav1.NewTime(t0.Add(after))}}}}
	}
}

func waiting(node, reason, msg string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
}

func unschedulable(msg string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.NewTime(t0.Add(time.Second))}}
	}
}

func disruption(reason, msg string, after time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
			Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0.Add(after))})
	}
}

func deleting(at time.Time) podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(at)) }
}

func nodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

func pullSecret(name string) podOpt {
	return func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: name}} }
}

// podEvent is a Warning event about pod, as the kubelet or scheduler writes it.
func podEvent(pod corev1.Pod, reason, msg string, after time.Duration) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + "." + reason, Namespace: "ml"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ml", Name: pod.Name, UID: pod.UID},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: msg,
		LastTimestamp: metav1.NewTime(t0.Add(after)),
	}
}

func node(name string, conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: conds}}
}

func ready(status corev1.ConditionStatus, msg string) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Message: msg, LastTransitionTime: metav1.NewTime(t0.Add(2 * time.Minute))}
}
