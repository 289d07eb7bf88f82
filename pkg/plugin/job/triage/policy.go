package triage

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// What a pod failure policy rule is about, as diagnose explains it.
const (
	RuleKindOOM       = "oom"
	RuleKindProgram   = "program"
	RuleKindStaging   = "staging"
	RuleKindCondition = "condition"
)

// FiredRule is the pod failure policy rule that ended the Job, read back from the Job's Failed
// (or FailureTarget) condition, whose reason is PodFailurePolicy and whose message names the
// pod, the exit code or condition, and the rule's index.
type FiredRule struct {
	Index    int    `json:"index"`
	Action   string `json:"action"`
	Kind     string `json:"kind"`
	Pod      string `json:"pod"`
	ExitCode *int32 `json:"exit_code"`
	// Rule is the rule as written in the Job ("FailJob on exit codes 2, 126, 127, 128 of container tao").
	Rule string `json:"rule"`
}

// The job controller's messages (pkg/controller/job/pod_failure_policy.go, Kubernetes 1.26+).
var (
	exitRuleMsg = regexp.MustCompile(`^Container (\S+) for pod [^/\s]+/(\S+) failed with exit code (\d+) matching (\w+) rule at index (\d+)`)
	condRuleMsg = regexp.MustCompile(`^Pod [^/\s]+/(\S+) has condition (\w+) matching (\w+) rule at index (\d+)`)
)

// firedRule returns the rule that failed the Job, or nil when no pod failure policy did.
func firedRule(job *batchv1.Job) *FiredRule {
	c := failedCondition(job)
	if c == nil || c.Reason != batchv1.JobReasonPodFailurePolicy {
		return nil
	}
	var r FiredRule
	if m := exitRuleMsg.FindStringSubmatch(c.Message); m != nil {
		code, _ := strconv.ParseInt(m[3], 10, 32)
		r.Pod, r.Action, r.Kind = m[2], m[4], RuleKindProgram
		r.ExitCode = ptrInt32(int32(code))
		r.Index, _ = strconv.Atoi(m[5])
		if code == 137 {
			r.Kind = RuleKindOOM
		}
		if _, ok := s3layout.StagingFailure(int32(code)); ok && r.Index == jobspec.RuleStaging {
			r.Kind = RuleKindStaging
		}
	} else if m := condRuleMsg.FindStringSubmatch(c.Message); m != nil {
		r.Pod, r.Action, r.Kind = m[1], m[3], RuleKindCondition
		r.Index, _ = strconv.Atoi(m[4])
	} else {
		return nil
	}
	if p := job.Spec.PodFailurePolicy; p != nil && r.Index < len(p.Rules) {
		r.Rule = describeRule(p.Rules[r.Index])
	}
	return &r
}

func ptrInt32(v int32) *int32 { return &v }

// describeRule renders one rule the way a person would say it.
func describeRule(rule batchv1.PodFailurePolicyRule) string {
	s := string(rule.Action)
	if e := rule.OnExitCodes; e != nil {
		codes := make([]string, len(e.Values))
		for i, v := range e.Values {
			codes[i] = strconv.Itoa(int(v))
		}
		word := "exit code"
		if len(codes) > 1 {
			word = "exit codes"
		}
		if e.Operator == batchv1.PodFailurePolicyOnExitCodesOpNotIn {
			word += " other than"
		}
		s += fmt.Sprintf(" on %s %s", word, strings.Join(codes, ", "))
		if e.ContainerName != nil {
			s += " of container " + *e.ContainerName
		}
		return s
	}
	var conds []string
	for _, c := range rule.OnPodConditions {
		conds = append(conds, fmt.Sprintf("%s=%s", c.Type, c.Status))
	}
	return s + " on pod condition " + strings.Join(conds, ", ")
}

// policyNote explains why the Job failed at once, with retries possibly left.
func policyNote(r *FiredRule) string {
	rule := fmt.Sprintf("rule %d", r.Index)
	if r.Rule != "" {
		rule += " (" + r.Rule + ")"
	}
	switch r.Kind {
	case RuleKindOOM:
		return fmt.Sprintf("the Job's pod failure policy failed it at once, by %s: pod %s was killed by SIGKILL (exit code 137, "+
			"the OOM killer's signal), and the same memory limit would run out again, so no retry was spent on it", rule, r.Pod)
	case RuleKindStaging:
		what, _ := s3layout.StagingFailure(*r.ExitCode)
		return fmt.Sprintf("the Job's pod failure policy failed it at once, by %s: pod %s exited with %s, a staging failure (%s), "+
			"which a rerun of the training would not fix, so no retry was spent on it", rule, r.Pod, describeExit(*r.ExitCode), what)
	case RuleKindProgram:
		return fmt.Sprintf("the Job's pod failure policy failed it at once, by %s: pod %s exited with %s, "+
			"a program error that retrying cannot fix, so no retry was spent on it", rule, r.Pod, describeExit(*r.ExitCode))
	}
	return fmt.Sprintf("the Job's pod failure policy failed it at once, by %s, on pod %s", rule, r.Pod)
}

// policyAction is what the Job's pod failure policy does with a failed pod ("" when its failure
// counts, or there is no policy).
func policyAction(job *batchv1.Job, pod *corev1.Pod) batchv1.PodFailurePolicyAction {
	return jobstatus.PolicyAction(job, pod)
}

// ignoredNote says that a disrupted pod did not count: the Job's policy ignored it and the Job
// controller replaced (or will replace) the pod.
func ignoredNote(in inspected, all []inspected) string {
	what := "failed"
	if in.finding != nil {
		what = fmt.Sprintf("was %s (%s)", strings.ToLower(in.finding.name), strings.TrimRight(strings.TrimSpace(in.finding.message), "."))
	}
	replaced := "the Job replaces it"
	for _, other := range all {
		if other.rank == in.rank && other.pod != in.pod && in.pod.CreationTimestamp.Before(&other.pod.CreationTimestamp) {
			replaced = "replaced by pod " + other.pod.Name
		}
	}
	return fmt.Sprintf("rank %d: pod %s %s; the Job's pod failure policy ignores disruptions, so it is not a failure "+
		"and used no retry; %s", in.rank, in.pod.Name, what, replaced)
}
