//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// evictLabel has the local cluster's kwok evict a running pod at once, as the kubelet does
// under node pressure: phase Failed, reason Evicted, DisruptionTarget=True and exit code 137.
const evictLabel = "sim.kubectl-tao.dev/evict"

func jobPods(t *testing.T, ns, job string) []corev1.Pod {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func rankOf(p *corev1.Pod) string { return p.Labels[batchv1.JobCompletionIndexAnnotation] }

// terminalJob waits until the Job is Complete or Failed and returns it with that condition.
func terminalJob(t *testing.T, ns, name string) (*batchv1.Job, batchv1.JobCondition) {
	t.Helper()
	var job *batchv1.Job
	var cond batchv1.JobCondition
	poll(t, 90*time.Second, "job "+name+" to finish", func(ctx context.Context) (bool, error) {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				job, cond = j, c
				return true, nil
			}
		}
		return false, nil
	})
	return job, cond
}

type diagnosis struct {
	ErrClass     *string  `json:"err_class"`
	Notes        []string `json:"notes"`
	FailedByRule *struct {
		Index    int    `json:"index"`
		Kind     string `json:"kind"`
		Pod      string `json:"pod"`
		ExitCode *int32 `json:"exit_code"`
	} `json:"failed_by_rule"`
}

func diagnoseJSON(t *testing.T, ns, name string) diagnosis {
	t.Helper()
	r := tao(t, nil, "diagnose", name, "-n", ns, "-o", "json")
	if r.code != 0 {
		t.Fatalf("diagnose: %s", r)
	}
	var d diagnosis
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("diagnose -o json: %v\n%s", err, r.stdout)
	}
	return d
}

// An evicted rank does not fail the Job: the pod failure policy ignores the DisruptionTarget
// condition, the Job controller replaces the pod once it is Failed, and the Job completes with
// nothing counted as failed.
func TestRetriesEvictedRankIsReplaced(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			name := fmt.Sprintf("evict%d", nodes)
			// 8s gives the test time to evict the last rank while it runs; its replacement then
			// runs 8s and succeeds.
			r := tao(t, nil, "submit", name, "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", strconv.Itoa(nodes),
				"--retries", "1", "--annotation", "sim.kubectl-tao.dev/run-duration=8s", "--", "python train.py")
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("submit: %s (a warning means the server dropped the retry fields)", r)
			}
			var victim string
			poll(t, 30*time.Second, "the last rank running", func(ctx context.Context) (bool, error) {
				for _, p := range jobPods(t, ns, name) {
					if p.Status.Phase == corev1.PodRunning && (nodes == 1 || rankOf(&p) == strconv.Itoa(nodes-1)) {
						victim = p.Name
						return true, nil
					}
				}
				return false, nil
			})
			patch := []byte(`{"metadata":{"labels":{"` + evictLabel + `":"true"}}}`)
			if _, err := client.CoreV1().Pods(ns).Patch(context.Background(), victim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}

			job, cond := terminalJob(t, ns, name)
			if cond.Type != batchv1.JobComplete {
				t.Fatalf("job ended %s (%s: %s), want Complete", cond.Type, cond.Reason, cond.Message)
			}
			if job.Status.Failed != 0 || job.Status.Succeeded != int32(nodes) {
				t.Errorf("failed %d, succeeded %d; want 0 and %d: an eviction must not count", job.Status.Failed, job.Status.Succeeded, nodes)
			}
			pods := jobPods(t, ns, name)
			var evicted, replacement *corev1.Pod
			for i := range pods {
				if pods[i].Name == victim {
					evicted = &pods[i]
				}
			}
			for i := range pods {
				if evicted != nil && pods[i].Name != victim && rankOf(&pods[i]) == rankOf(evicted) {
					replacement = &pods[i]
				}
			}
			if evicted == nil || evicted.Status.Phase != corev1.PodFailed || evicted.Status.Reason != "Evicted" {
				t.Fatalf("evicted pod %s: %+v", victim, evicted)
			}
			if replacement == nil || replacement.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("no succeeded replacement of %s among %d pods", victim, len(pods))
			}
			if len(pods) != nodes+1 {
				t.Errorf("%d pods, want %d ranks plus one replacement", len(pods), nodes)
			}

			st := tao(t, nil, "status", name, "-n", ns, "-o", "json")
			var summary struct {
				Status  string `json:"status"`
				Message string `json:"message"`
				Failed  int32  `json:"failed"`
			}
			if err := json.Unmarshal([]byte(st.stdout), &summary); err != nil || summary.Status != "Complete" || summary.Failed != 0 ||
				!strings.Contains(summary.Message, "1 pod replaced after an eviction or preemption (not a failure)") {
				t.Errorf("status = %+v (%v), want Complete, 0 failed, and the replacement named", summary, err)
			}
			d := diagnoseJSON(t, ns, name)
			if d.ErrClass != nil || !strings.Contains(strings.Join(d.Notes, "\n"), "replaced by pod "+replacement.Name) {
				t.Errorf("diagnose: class %v, notes %q; want no issue and a note on the replacement", d.ErrClass, d.Notes)
			}
		})
	}
}

// An OOM kill and a command that cannot run fail the Job at once, with retries left: the Job's
// condition names the policy and the rule, no pod is replaced, and diagnose says which rule.
func TestRetriesFailFastOnOOMAndProgramErrors(t *testing.T) {
	cases := []struct {
		fate     []string
		exitCode int32
		rule     int
		kind     string
	}{
		{fate: []string{"sim.kubectl-tao.dev/fate=oom"}, exitCode: 137, rule: 1, kind: "oom"},
		{fate: []string{"sim.kubectl-tao.dev/fate=exit", "sim.kubectl-tao.dev/exit-code=127"}, exitCode: 127, rule: 2, kind: "program"},
	}
	for _, tc := range cases {
		for _, nodes := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s %d nodes", tc.kind, nodes), func(t *testing.T) {
				t.Parallel()
				ns := namespace(t)
				name := fmt.Sprintf("%s%d", tc.kind, nodes)
				args := []string{"submit", name, "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", strconv.Itoa(nodes),
					"--retries", "3", "--annotation", "sim.kubectl-tao.dev/run-duration=1s"}
				for _, a := range tc.fate {
					args = append(args, "--annotation", a)
				}
				if r := tao(t, nil, append(args, "--", "python train.py")...); r.code != 0 {
					t.Fatalf("submit: %s", r)
				}
				w := tao(t, nil, "wait", name, "-n", ns, "--timeout", "90s")
				if w.code != 9 {
					t.Errorf("wait: %s; want exit 9 (JobFailed)", w)
				}
				_, cond := terminalJob(t, ns, name)
				want := fmt.Sprintf("failed with exit code %d matching FailJob rule at index %d", tc.exitCode, tc.rule)
				if cond.Type != batchv1.JobFailed || cond.Reason != batchv1.JobReasonPodFailurePolicy || !strings.Contains(cond.Message, want) {
					t.Fatalf("condition %s %s: %s; want Failed PodFailurePolicy %q", cond.Type, cond.Reason, cond.Message, want)
				}
				if pods := jobPods(t, ns, name); len(pods) != nodes {
					t.Errorf("%d pods, want %d: nothing may be retried", len(pods), nodes)
				}
				d := diagnoseJSON(t, ns, name)
				if d.ErrClass == nil || *d.ErrClass != "ERR_PROGRAM" || d.FailedByRule == nil || d.FailedByRule.Index != tc.rule ||
					d.FailedByRule.Kind != tc.kind || d.FailedByRule.ExitCode == nil || *d.FailedByRule.ExitCode != tc.exitCode {
					t.Errorf("diagnose: class %v, failed_by_rule %+v; want ERR_PROGRAM, rule %d (%s)", d.ErrClass, d.FailedByRule, tc.rule, tc.kind)
				}
				r := tao(t, nil, "diagnose", name, "-n", ns)
				contains(t, r, 0, fmt.Sprintf("failed it at once, by rule %d", tc.rule), "no retry was spent")
			})
		}
	}
}

// Any other failure (exit 1: a traceback, an NCCL error) is retried: once per rank here, then
// the Job fails with the limit's reason.
func TestRetriesBoundOtherFailures(t *testing.T) {
	// Multi-node: every rank fails in each round here, so the job-wide backoffLimit (retries x
	// nodes) and the per-rank limit run out in the same round; either may be the reason.
	cases := []struct {
		nodes   int
		reasons []string
	}{
		{nodes: 1, reasons: []string{batchv1.JobReasonBackoffLimitExceeded}},
		{nodes: 2, reasons: []string{batchv1.JobReasonMaxFailedIndexesExceeded, batchv1.JobReasonBackoffLimitExceeded}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d nodes", tc.nodes), func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			name := fmt.Sprintf("crash%d", tc.nodes)
			r := tao(t, nil, "submit", name, "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", strconv.Itoa(tc.nodes),
				"--retries", "1", "--annotation", "sim.kubectl-tao.dev/fate=exit", "--annotation", "sim.kubectl-tao.dev/run-duration=1s",
				"--", "python train.py")
			if r.code != 0 {
				t.Fatalf("submit: %s", r)
			}
			_, cond := terminalJob(t, ns, name)
			if cond.Type != batchv1.JobFailed || !slices.Contains(tc.reasons, cond.Reason) {
				t.Fatalf("condition %s %s: %s; want Failed %v", cond.Type, cond.Reason, cond.Message, tc.reasons)
			}
			// A rank failed, was replaced once, and failed again.
			count := map[string]int{}
			for _, p := range jobPods(t, ns, name) {
				count[rankOf(&p)]++
			}
			retried := false
			for _, n := range count {
				retried = retried || n == 2
			}
			if !retried {
				t.Errorf("pods per rank %v: want one rank tried twice (once, and its one retry)", count)
			}
		})
	}
}

// crashLabel has the local cluster's kwok end a running pod with the label's value as exit code,
// as a rank dies when NCCL or the rendezvous fails under it after a peer was lost.
const crashLabel = "sim.kubectl-tao.dev/crash"

func label(t *testing.T, ns, pod, key, value string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + key + `":"` + value + `"}}}`)
	if _, err := client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// What the Job does for a torchrun gang: rank 1 is evicted (free), rank 0 then dies of the NCCL
// error its loss causes (exit 1, one retry of rank 0), every rank is replaced once terminated,
// and the new gang completes. --retries 1 is enough for one such incident on any job size.
func TestRetriesGangRestartsThroughTheJob(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "gang", "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", "2", "--retries", "1",
		"--annotation", "sim.kubectl-tao.dev/run-duration=10s", "--", "torchrun train.py")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	first := map[string]string{}
	poll(t, 30*time.Second, "both ranks running", func(ctx context.Context) (bool, error) {
		for _, p := range jobPods(t, ns, "gang") {
			if p.Status.Phase == corev1.PodRunning {
				first[rankOf(&p)] = p.Name
			}
		}
		return len(first) == 2, nil
	})
	label(t, ns, first["1"], evictLabel, "true")
	poll(t, 10*time.Second, "rank 1 evicted", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, first["1"], metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed, err
	})
	label(t, ns, first["0"], crashLabel, "1")

	job, cond := terminalJob(t, ns, "gang")
	if cond.Type != batchv1.JobComplete {
		t.Fatalf("job ended %s (%s: %s), want Complete", cond.Type, cond.Reason, cond.Message)
	}
	if job.Status.Failed != 1 || job.Status.Succeeded != 2 {
		t.Errorf("failed %d, succeeded %d; want 1 (rank 0's crash; the eviction is free) and 2", job.Status.Failed, job.Status.Succeeded)
	}
	pods := jobPods(t, ns, "gang")
	perRank := map[string][]corev1.PodPhase{}
	for _, p := range pods {
		perRank[rankOf(&p)] = append(perRank[rankOf(&p)], p.Status.Phase)
	}
	for _, rank := range []string{"0", "1"} {
		if got := perRank[rank]; len(got) != 2 || !slices.Contains(got, corev1.PodFailed) || !slices.Contains(got, corev1.PodSucceeded) {
			t.Errorf("rank %s pods %v; want the first Failed and its replacement Succeeded", rank, got)
		}
	}
	d := diagnoseJSON(t, ns, "gang")
	if d.ErrClass != nil || !strings.Contains(strings.Join(d.Notes, "\n"), "rank 1: pod "+first["1"]+" was evicted") {
		t.Errorf("diagnose: class %v, notes %q", d.ErrClass, d.Notes)
	}
}
