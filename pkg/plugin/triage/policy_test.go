package triage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

// retriesJob is a job submitted with --retries: the pod failure policy jobspec builds.
func retriesJob(name string, nodes int32, conds ...batchv1.JobCondition) *batchv1.Job {
	j := testJob(name, nodes, conds...)
	j.Spec.PodFailurePolicy = jobspec.PodFailurePolicy()
	return j
}

// The job controller's messages, exactly as Kubernetes 1.37 writes them.
func policyCond(pod string, code int, index int) batchv1.JobCondition {
	return failedCond(batchv1.JobReasonPodFailurePolicy,
		fmt.Sprintf("Container tao for pod ml/%s failed with exit code %d matching FailJob rule at index %d", pod, code, index), t0.Add(4*time.Minute))
}

// evicted is a pod the kubelet evicted under memory pressure at t0+after: Failed, reason
// Evicted, DisruptionTarget, and its container SIGKILLed (137, as the OOM rule would match).
func evicted(node string, after time.Duration) podOpt {
	return func(p *corev1.Pod) {
		exited(node, 137, "Error", after)(p)
		p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory. "
		disruption("TerminationByKubelet", "The node was low on resource: memory. ", after)(p)
	}
}

func createdAt(after time.Duration) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(after)) }
}

func renamed(name string) podOpt {
	return func(p *corev1.Pod) { p.Name, p.UID = name, types.UID("uid-"+name) }
}

func TestDiagnoseRetriesPolicy(t *testing.T) {
	complete := batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}
	tests := []struct {
		name       string
		job        *batchv1.Job
		pods       []corev1.Pod
		wantClass  string // "" means no issue
		wantFirst  string
		wantPod    string
		wantKind   string // of FailedByRule; "" means none
		wantRule   string
		wantNotes  []string
		wantSugg   string
		wantEvents int
	}{
		{
			name: "evicted rank replaced, job running: no issue, a note",
			job:  retriesJob("ddp", 2),
			pods: []corev1.Pod{
				testPod("ddp", 0, running("gpu-node-0")),
				testPod("ddp", 1, evicted("gpu-node-1", time.Minute)),
				testPod("ddp", 1, renamed("ddp-1-fghij"), createdAt(70*time.Second), running("gpu-node-2")),
			},
			wantNotes: []string{"rank 1: pod ddp-1-abcde was evicted (TerminationByKubelet: The node was low on resource: memory)",
				"not a failure and used no retry; replaced by pod ddp-1-fghij"},
		},
		{
			name: "evicted rank replaced, job complete: a note",
			job:  retriesJob("ddp", 2, complete),
			pods: []corev1.Pod{
				testPod("ddp", 0, succeeded("gpu-node-0")),
				testPod("ddp", 1, evicted("gpu-node-1", time.Minute)),
				testPod("ddp", 1, renamed("ddp-1-fghij"), createdAt(70*time.Second), succeeded("gpu-node-2")),
			},
			wantNotes: []string{"replaced by pod ddp-1-fghij"},
		},
		{
			name: "without the policy an eviction is still a failure",
			job:  testJob("ddp", 2),
			pods: []corev1.Pod{
				testPod("ddp", 0, running("gpu-node-0")),
				testPod("ddp", 1, evicted("gpu-node-1", time.Minute)),
			},
			wantClass: ErrInfra, wantFirst: "Evicted", wantPod: "ddp-1-abcde", wantEvents: 1,
		},
		{
			name: "OOM fails the job at once: rule 1 named, the OOM is the root even after an ignored eviction",
			job:  retriesJob("ddp", 2, policyCond("ddp-0-abcde", 137, 1)),
			pods: []corev1.Pod{
				testPod("ddp", 0, exited("gpu-node-0", 137, "OOMKilled", 3*time.Minute)),
				testPod("ddp", 1, evicted("gpu-node-1", time.Minute)),
				testPod("ddp", 1, renamed("ddp-1-fghij"), createdAt(70*time.Second), exited("gpu-node-2", 1, "Error", 3*time.Minute)),
			},
			wantClass: ErrProgram, wantFirst: "OOMKilled", wantPod: "ddp-0-abcde", wantKind: RuleKindOOM,
			wantRule: "FailJob on exit code 137 of container tao", wantSugg: oomSuggestion, wantEvents: 2,
			wantNotes: []string{"failed it at once, by rule 1 (FailJob on exit code 137 of container tao): pod ddp-0-abcde was killed by SIGKILL (exit code 137, the OOM killer's signal)",
				"no retry was spent", "rank 1: pod ddp-1-abcde was evicted"},
		},
		{
			name: "the pod named by the policy is the root, not a peer that died a moment earlier",
			job:  retriesJob("ddp", 2, policyCond("ddp-1-abcde", 127, 2)),
			pods: []corev1.Pod{
				testPod("ddp", 0, exited("gpu-node-0", 1, "Error", time.Minute)),
				testPod("ddp", 1, exited("gpu-node-1", 127, "Error", 2*time.Minute)),
			},
			wantClass: ErrProgram, wantFirst: "Error", wantPod: "ddp-1-abcde", wantKind: RuleKindProgram,
			wantRule: "FailJob on exit codes 2, 126, 127, 128 of container tao", wantSugg: "The command was not found (exit code 127)", wantEvents: 2,
			wantNotes: []string{"pod ddp-1-abcde exited with exit code 127, a program error that retrying cannot fix"},
		},
		{
			name: "policy failure with the pods gone is the program's", job: retriesJob("t", 1, policyCond("t-0-abcde", 2, 2)),
			wantClass: ErrProgram, wantKind: RuleKindProgram, wantSugg: "pods are gone",
		},
		{
			name:      "per-rank retries exhausted with the pods gone is the program's",
			job:       retriesJob("t", 2, failedCond(batchv1.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes", t0)),
			wantClass: ErrProgram, wantSugg: "pods are gone",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Analyze(Snapshot{Job: tc.job, Pods: tc.pods, Now: now})
			if tc.wantClass == "" {
				if a.ErrClass != nil || len(a.JobFailureByNodeEvent) != 0 {
					t.Fatalf("want no issue, got %v %+v", a.ErrClass, a.JobFailureByNodeEvent)
				}
			} else if a.ErrClass == nil || *a.ErrClass != tc.wantClass {
				t.Fatalf("err_class = %v, want %s (%+v)", a.ErrClass, tc.wantClass, a.JobFailureByNodeEvent)
			}
			if len(a.JobFailureByNodeEvent) != tc.wantEvents {
				t.Errorf("findings = %+v, want %d", a.JobFailureByNodeEvent, tc.wantEvents)
			}
			if tc.wantFirst != "" && (a.FirstFailure == nil || a.FirstFailure.NodeEventName != tc.wantFirst || a.FirstFailure.Pod != tc.wantPod) {
				t.Errorf("first failure = %+v, want %s on %s", a.FirstFailure, tc.wantFirst, tc.wantPod)
			}
			switch {
			case tc.wantKind == "" && a.FailedByRule != nil:
				t.Errorf("failed_by_rule = %+v, want none", a.FailedByRule)
			case tc.wantKind != "" && (a.FailedByRule == nil || a.FailedByRule.Kind != tc.wantKind || !strings.Contains(a.FailedByRule.Rule, tc.wantRule)):
				t.Errorf("failed_by_rule = %+v, want kind %s, rule %q", a.FailedByRule, tc.wantKind, tc.wantRule)
			}
			if !strings.Contains(a.Suggestion, tc.wantSugg) {
				t.Errorf("suggestion = %q, want %q", a.Suggestion, tc.wantSugg)
			}
			notes := strings.Join(a.Notes, "\n")
			for _, n := range tc.wantNotes {
				if !strings.Contains(notes, n) {
					t.Errorf("notes = %q, want %q", notes, n)
				}
			}
		})
	}
}

// The controller evaluates rules in order: an evicted pod that was SIGKILLed (137) is ignored by
// the first rule before the OOM rule could fail the job.
func TestPolicyAction(t *testing.T) {
	job := retriesJob("t", 1)
	tests := []struct {
		name string
		pod  corev1.Pod
		want batchv1.PodFailurePolicyAction
	}{
		{"evicted with 137: ignored first", testPod("t", 0, evicted("a", time.Minute)), batchv1.PodFailurePolicyActionIgnore},
		{"OOM", testPod("t", 0, exited("a", 137, "OOMKilled", time.Minute)), batchv1.PodFailurePolicyActionFailJob},
		{"command not found", testPod("t", 0, exited("a", 127, "Error", time.Minute)), batchv1.PodFailurePolicyActionFailJob},
		{"traceback: counts", testPod("t", 0, exited("a", 1, "Error", time.Minute)), ""},
		{"running: nothing", testPod("t", 0, running("a")), ""},
	}
	for _, tc := range tests {
		if got := policyAction(job, &tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := policyAction(testJob("t", 1), ptrTo(testPod("t", 0, evicted("a", time.Minute)))); got != "" {
		t.Errorf("no policy: %q", got)
	}
}

func TestFiredRuleOnACondition(t *testing.T) {
	job := retriesJob("t", 1, failedCond(batchv1.JobReasonPodFailurePolicy,
		"Pod ml/t-0-abcde has condition DisruptionTarget matching FailJob rule at index 0", t0))
	r := firedRule(job)
	if r == nil || r.Kind != RuleKindCondition || r.Pod != "t-0-abcde" || r.Index != 0 || r.Rule != "Ignore on pod condition DisruptionTarget=True" {
		t.Errorf("firedRule = %+v", r)
	}
	if firedRule(testJob("t", 1, failedCond("BackoffLimitExceeded", "x", t0))) != nil {
		t.Error("a backoff failure is no policy rule")
	}
}
