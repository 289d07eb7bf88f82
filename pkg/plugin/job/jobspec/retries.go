package jobspec

import (
	"math"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// MaxRetries bounds --retries. Evictions, preemptions and node loss never count against it, so
// it only pays for crashes; a GPU job that crashes more than 20 times in a row is broken, not
// unlucky, and every retry costs a full restart of its GPUs. The bound catches typos (1000)
// that would otherwise burn a cluster for days.
const MaxRetries = 20

// Exit codes the pod failure policy fails the Job on at once, whatever retries are left:
// retrying them cannot help, because the same pod with the same command fails the same way.
var (
	// ExitOOM is 128+SIGKILL, what the training container returns when the kernel's OOM killer
	// ends it. The policy cannot match the container's "OOMKilled" reason (rules see only exit
	// codes and pod conditions), so it matches 137. The other common SIGKILLs come from
	// outside: the kubelet ending a pod past its grace period on eviction or preemption, and
	// those carry the DisruptionTarget condition, which the first rule ignores before this one
	// is looked at. A 137 without it is, in practice, the OOM killer, and the same memory
	// limit with the same batch size runs out of memory again.
	ExitOOM int32 = 137
	// ExitProgram are the codes of a command that cannot run as given: 2 (bash's and
	// argparse's usage errors, python's "can't open file"), 126 (not executable), 127 (not
	// found: the image lacks the program) and 128 (the runtime could not start the container's
	// process at all: containerd's StartError, e.g. a bash command string on an image without
	// /bin/bash). Exit code 1 is not here on purpose: it is what a
	// Python traceback, a torchrun worker failure and TAO's launcher (which turns every failure
	// into 1) return, and on GPU clusters it often means an NCCL timeout, a lost peer, a GPU Xid
	// error or a storage hiccup, which a retry does fix. --retries N bounds those, and a real
	// bug that exits 1 costs at most N restarts.
	ExitProgram = []int32{2, 126, 127, 128}
)

// Indexes of the pod failure policy's rules. diagnose reads a FailJob rule's index back from the
// Job's Failed condition ("... matching FailJob rule at index 1") to say which one fired.
const (
	RuleDisruption = 0
	RuleOOM        = 1
	RuleProgram    = 2
	// RuleStaging is only in the policy of a job with --output-path or --input.
	RuleStaging = 3
)

// PodFailurePolicy is the policy --retries N > 0 sets, rules in order (the first match wins):
//
//  0. Ignore the DisruptionTarget condition: preemption, API eviction (drains, autoscalers),
//     kubelet node-pressure eviction and node loss are not the program's fault; the pod is
//     replaced and nothing is counted. This rule must come first: an evicted pod killed past
//     its grace period also exits 137.
//  1. FailJob on ExitOOM in the training container.
//  2. FailJob on ExitProgram in the training container.
//
// A staged job (StagedPodFailurePolicy) adds
//
//  3. FailJob on s3layout.StagingExitCodes: the staging wrapper's own failures. A failed upload
//     (retried by the stager already) or a missing output after a successful run must not buy
//     another full training run, nor a failed download of the inputs another GPU pod.
//
// Every other failure counts against the retries (backoffLimit, or backoffLimitPerIndex for
// multi-node jobs).
func PodFailurePolicy() *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{
			Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{
				Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			}},
		},
		{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To(ContainerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
				Values: []int32{ExitOOM},
			},
		},
		{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To(ContainerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
				Values: append([]int32(nil), ExitProgram...),
			},
		},
	}}
}

// StagedPodFailurePolicy is PodFailurePolicy with the staging rule (RuleStaging) after the others.
func StagedPodFailurePolicy() *batchv1.PodFailurePolicy {
	p := PodFailurePolicy()
	p.Rules = append(p.Rules, batchv1.PodFailurePolicyRule{
		Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To(ContainerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn,
			Values: append([]int32(nil), s3layout.StagingExitCodes...),
		},
	})
	return p
}

// applyRetries sets the failure handling of --retries on the Job. 0 keeps the SDK's contract:
// backoffLimit 0 and no policy, so the first failure fails the Job.
//
// N > 0 sets PodFailurePolicy and podReplacementPolicy Failed: a replacement pod is created only
// once the failed one has fully terminated, so two pods of the same rank never run side by
// side (the API also requires Failed with a pod failure policy). restartPolicy is Never
// already, as a pod failure policy requires.
//
// One node: backoffLimit N. Several nodes: backoffLimitPerIndex N with maxFailedIndexes 0.
// When one rank of a torchrun gang dies, its peers die after it (NCCL errors, a broken
// rendezvous), so a single incident fails every rank once: a job-wide backoffLimit of N
// would be spent by one incident on a job of N nodes, while N per rank means "N incidents"
// whatever the job's size. maxFailedIndexes 0 fails the Job as soon as one rank is out of
// retries, instead of leaving its peers hung at a collective until the end. backoffLimit is
// also set, to N x nodes, so that a server without per-index limits (it drops the field)
// still bounds the total instead of defaulting to 6.
func applyRetries(s Spec, job *batchv1.Job) {
	if s.Retries <= 0 {
		return
	}
	job.Spec.PodFailurePolicy = PodFailurePolicy()
	if s.Staging != nil {
		job.Spec.PodFailurePolicy = StagedPodFailurePolicy()
	}
	job.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	if !s.MultiNode() {
		job.Spec.BackoffLimit = ptr.To(int32(s.Retries))
		return
	}
	job.Spec.BackoffLimitPerIndex = ptr.To(int32(s.Retries))
	job.Spec.MaxFailedIndexes = ptr.To[int32](0)
	// An elastic job may grow to NodesMax ranks after it is made.
	total := int64(s.Retries) * int64(max(s.Nodes, s.NodesMax))
	job.Spec.BackoffLimit = ptr.To(int32(min(total, math.MaxInt32)))
}

// DroppedRetryFields names the failure-handling fields sent in want that the API server did not
// keep in got (the object its create returned). Servers drop fields of disabled or unknown
// features silently: podReplacementPolicy before Kubernetes 1.29 (or with its feature gate
// off), backoffLimitPerIndex and maxFailedIndexes before 1.29, podFailurePolicy before 1.26.
func DroppedRetryFields(want, got *batchv1.Job) []string {
	if want == nil || got == nil {
		return nil
	}
	var dropped []string
	w, g := &want.Spec, &got.Spec
	if w.PodFailurePolicy != nil && (g.PodFailurePolicy == nil || len(g.PodFailurePolicy.Rules) != len(w.PodFailurePolicy.Rules)) {
		dropped = append(dropped, "podFailurePolicy")
	}
	if w.PodReplacementPolicy != nil && (g.PodReplacementPolicy == nil || *g.PodReplacementPolicy != *w.PodReplacementPolicy) {
		dropped = append(dropped, "podReplacementPolicy")
	}
	if w.BackoffLimitPerIndex != nil && g.BackoffLimitPerIndex == nil {
		dropped = append(dropped, "backoffLimitPerIndex")
	}
	if w.MaxFailedIndexes != nil && g.MaxFailedIndexes == nil {
		dropped = append(dropped, "maxFailedIndexes")
	}
	return dropped
}
