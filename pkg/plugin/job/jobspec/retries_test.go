package jobspec

import (
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The policy's invariants, checked on the objects so that a careless -update cannot bless a
// policy in the wrong order.
func TestRetriesContract(t *testing.T) {
	tests := []struct {
		name                        string
		nodes, retries              int
		wantBackoff                 int32
		wantPerIndex, wantMaxFailed *int32
		wantPolicy                  bool
	}{
		{name: "default: the SDK's contract", nodes: 1, retries: 0, wantBackoff: 0},
		{name: "default multi-node", nodes: 4, retries: 0, wantBackoff: 0},
		{name: "one node", nodes: 1, retries: 3, wantBackoff: 3, wantPolicy: true},
		{name: "multi-node: per rank, the job fails when one rank is out", nodes: 4, retries: 2, wantBackoff: 8,
			wantPerIndex: ptr.To[int32](2), wantMaxFailed: ptr.To[int32](0), wantPolicy: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.Name, s.Nodes, s.Retries = "ddp", tc.nodes, tc.retries
			job := Build(s).Job
			spec := job.Spec
			if *spec.BackoffLimit != tc.wantBackoff {
				t.Errorf("backoffLimit = %d, want %d", *spec.BackoffLimit, tc.wantBackoff)
			}
			if !equalPtr(spec.BackoffLimitPerIndex, tc.wantPerIndex) || !equalPtr(spec.MaxFailedIndexes, tc.wantMaxFailed) {
				t.Errorf("backoffLimitPerIndex %v, maxFailedIndexes %v; want %v, %v", spec.BackoffLimitPerIndex, spec.MaxFailedIndexes, tc.wantPerIndex, tc.wantMaxFailed)
			}
			if spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("restartPolicy = %s, want Never (a pod failure policy requires it)", spec.Template.Spec.RestartPolicy)
			}
			if !tc.wantPolicy {
				if spec.PodFailurePolicy != nil || spec.PodReplacementPolicy != nil {
					t.Errorf("retries 0 must set no policy: %v, %v", spec.PodFailurePolicy, spec.PodReplacementPolicy)
				}
				return
			}
			if spec.PodReplacementPolicy == nil || *spec.PodReplacementPolicy != batchv1.Failed {
				t.Errorf("podReplacementPolicy = %v, want Failed", spec.PodReplacementPolicy)
			}
			rules := spec.PodFailurePolicy.Rules
			if len(rules) != 3 {
				t.Fatalf("rules = %d, want 3", len(rules))
			}
			d := rules[RuleDisruption]
			if d.Action != batchv1.PodFailurePolicyActionIgnore || len(d.OnPodConditions) != 1 || d.OnPodConditions[0].Type != corev1.DisruptionTarget {
				t.Errorf("rule %d = %+v, want Ignore on DisruptionTarget first", RuleDisruption, d)
			}
			for i, codes := range map[int][]int32{RuleOOM: {137}, RuleProgram: {2, 126, 127, 128}} {
				r := rules[i]
				if r.Action != batchv1.PodFailurePolicyActionFailJob || r.OnExitCodes == nil || *r.OnExitCodes.ContainerName != ContainerName ||
					r.OnExitCodes.Operator != batchv1.PodFailurePolicyOnExitCodesOpIn || !slices.Equal(r.OnExitCodes.Values, codes) {
					t.Errorf("rule %d = %+v, want FailJob on %v of container %s", i, r, codes, ContainerName)
				}
				if slices.Contains(r.OnExitCodes.Values, 1) {
					t.Errorf("rule %d fails the job on exit code 1, which retries are for", i)
				}
			}
		})
	}
}

// Staging and --retries together: the wrapper's own failures fail the Job at once, after the
// other rules; a job without staging has no such rule (201 is then just its command's code).
func TestRetriesWithStagingFailAtOnceOnStagingCodes(t *testing.T) {
	s := stagedSpec()
	s.Retries = 3
	rules := Build(s).Job.Spec.PodFailurePolicy.Rules
	if len(rules) != 4 {
		t.Fatalf("rules = %d, want 4", len(rules))
	}
	r := rules[RuleStaging]
	if r.Action != batchv1.PodFailurePolicyActionFailJob || r.OnExitCodes == nil || *r.OnExitCodes.ContainerName != ContainerName ||
		!slices.Equal(r.OnExitCodes.Values, []int32{201, 202, 203}) {
		t.Errorf("rule %d = %+v, want FailJob on 201, 202, 203", RuleStaging, r)
	}
	for i := range RuleStaging {
		if !equalRule(rules[i], PodFailurePolicy().Rules[i]) {
			t.Errorf("rule %d moved: %+v", i, rules[i])
		}
	}
	// The codes stay clear of the ones the other rules and the retries are about.
	for _, c := range r.OnExitCodes.Values {
		if c <= 192 || slices.Contains(ExitProgram, c) || c == ExitOOM {
			t.Errorf("staging code %d collides with a program's or a signal's", c)
		}
	}
	plain := validSpec()
	plain.Retries = 3
	if n := len(Build(plain).Job.Spec.PodFailurePolicy.Rules); n != 3 {
		t.Errorf("an unstaged job has %d rules, want 3", n)
	}
}

func equalRule(a, b batchv1.PodFailurePolicyRule) bool {
	if a.Action != b.Action || (a.OnExitCodes == nil) != (b.OnExitCodes == nil) {
		return false
	}
	return a.OnExitCodes == nil || slices.Equal(a.OnExitCodes.Values, b.OnExitCodes.Values)
}

func equalPtr(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func TestDroppedRetryFields(t *testing.T) {
	s := validSpec()
	s.Name, s.Nodes, s.Retries = "ddp", 2, 1
	want := Build(s).Job
	tests := []struct {
		name string
		got  func(*batchv1.Job)
		want []string
	}{
		{name: "all kept", got: func(*batchv1.Job) {}},
		{name: "1.28 without feature gates: replacement and per-index dropped", got: func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy, j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = nil, nil, nil
		}, want: []string{"podReplacementPolicy", "backoffLimitPerIndex", "maxFailedIndexes"}},
		{name: "no pod failure policy", got: func(j *batchv1.Job) { j.Spec.PodFailurePolicy = nil }, want: []string{"podFailurePolicy"}},
		{name: "policy truncated", got: func(j *batchv1.Job) { j.Spec.PodFailurePolicy.Rules = j.Spec.PodFailurePolicy.Rules[:1] }, want: []string{"podFailurePolicy"}},
		{name: "replacement policy changed", got: func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}, want: []string{"podReplacementPolicy"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := want.DeepCopy()
			tc.got(got)
			if d := DroppedRetryFields(want, got); !slices.Equal(d, tc.want) {
				t.Errorf("DroppedRetryFields = %v, want %v", d, tc.want)
			}
		})
	}
	// Nothing asked, nothing to miss: a plain job on an old server.
	plain := Build(validSpec()).Job
	if d := DroppedRetryFields(plain, plain.DeepCopy()); d != nil {
		t.Errorf("plain job: %v", d)
	}
}
