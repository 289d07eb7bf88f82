package triage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// retriesJob is a job submitted with --retries: the pod failure policy jobspec builds.
func retriesJob(name string, nodes int32, conds ...batchv1.JobCondition) *batchv1.Job {
	return jobOf(name, nodes).Conditions(conds...).PodFailurePolicy(jobspec.PodFailurePolicy()).Obj()
}

// The job controller's messages, exactly as Kubernetes 1.37 writes them.
func policyCond(pod string, code int, index int) batchv1.JobCondition {
	return failedCond(batchv1.JobReasonPodFailurePolicy,
		fmt.Sprintf("Container tao for pod ml/%s failed with exit code %d matching FailJob rule at index %d", pod, code, index), t0.Add(4*time.Minute))
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
				podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Name("ddp-1-fghij").UID("uid-" + "ddp-1-fghij").Created(t0.Add(70 * time.Second)).Node("gpu-node-2").Running(t0.Add(time.Minute)).Val(),
			},
			wantNotes: []string{"rank 1: pod ddp-1-abcde was evicted (TerminationByKubelet: The node was low on resource: memory)",
				"not a failure and used no retry; replaced by pod ddp-1-fghij"},
		},
		{
			name: "evicted rank replaced, job complete: a note",
			job:  retriesJob("ddp", 2, complete),
			pods: []corev1.Pod{
				podOf("ddp", 0).Node("gpu-node-0").Succeeded(t0.Add(5 * time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Name("ddp-1-fghij").UID("uid-" + "ddp-1-fghij").Created(t0.Add(70 * time.Second)).Node("gpu-node-2").Succeeded(t0.Add(5 * time.Minute)).Val(),
			},
			wantNotes: []string{"replaced by pod ddp-1-fghij"},
		},
		{
			name: "without the policy an eviction is still a failure",
			job:  testJob("ddp", 2),
			pods: []corev1.Pod{
				podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Val(),
			},
			wantClass: ErrInfra, wantFirst: "Evicted", wantPod: "ddp-1-abcde", wantEvents: 1,
		},
		{
			name: "OOM fails the job at once: rule 1 named, the OOM is the root even after an ignored eviction",
			job:  retriesJob("ddp", 2, policyCond("ddp-0-abcde", 137, 1)),
			pods: []corev1.Pod{
				podOf("ddp", 0).Node("gpu-node-0").Exited(137, "OOMKilled", t0.Add(3*time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Name("ddp-1-fghij").UID("uid-"+"ddp-1-fghij").Created(t0.Add(70*time.Second)).Node("gpu-node-2").Exited(1, "Error", t0.Add(3*time.Minute)).Val(),
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
				podOf("ddp", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(time.Minute)).Val(),
				podOf("ddp", 1).Node("gpu-node-1").Exited(127, "Error", t0.Add(2*time.Minute)).Val(),
			},
			wantClass: ErrProgram, wantFirst: "Error", wantPod: "ddp-1-abcde", wantKind: RuleKindProgram,
			wantRule: "FailJob on exit codes 2, 126, 127, 128 of container tao", wantSugg: "The command was not found (exit code 127)", wantEvents: 2,
			wantNotes: []string{"pod ddp-1-abcde exited with exit code 127, a program error that retrying cannot fix"},
		},
		{
			name: "staged job: a failed upload fails it at once by the staging rule, named a staging failure",
			job: jobOf("t", 1).Conditions(policyCond("t-0-abcde", 202, jobspec.RuleStaging)).
				PodFailurePolicy(jobspec.StagedPodFailurePolicy()).Obj(),
			pods:      []corev1.Pod{stagedPod(podOf("t", 0).Node("gpu-node-0").Exited(202, "Error", t0.Add(2*time.Minute)).Val())},
			wantClass: ErrProgram, wantFirst: "StagingFailed", wantPod: "t-0-abcde", wantKind: RuleKindStaging,
			wantRule: "FailJob on exit codes 201, 202, 203 of container tao", wantSugg: "A staging failure, not the training command's", wantEvents: 1,
			wantNotes: []string{"pod t-0-abcde exited with exit code 202, a staging failure (stage out failed: the command succeeded but its outputs were not uploaded)",
				"no retry was spent"},
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

// stagedPod gives the pod's container the staging wrapper's variables, as submit does.
func stagedPod(p corev1.Pod) corev1.Pod {
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: jobspec.EnvStager, Value: "/tao-stager/kubectl-tao"})
	return p
}

// Without --retries a staging code is named all the same, but only in a staged pod: elsewhere
// 201 to 203 are the command's own codes.
func TestDiagnoseStagingCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    corev1.Pod
		first  string
		inMsg  string
		inSugg string
	}{
		{"staged, stage in failed", stagedPod(podOf("t", 0).Node("gpu-node-0").Exited(201, "Error", t0.Add(time.Minute)).Val()),
			"StagingFailed", "exit code 201: stage in failed", "stage in's error"},
		{"not staged", podOf("t", 0).Node("gpu-node-0").Exited(201, "Error", t0.Add(time.Minute)).Val(),
			"Error", "exit code 201", "The training command exited with code 201"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := jobOf("t", 1).Conditions(failedCond(batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", t0.Add(2*time.Minute))).Obj()
			a := Analyze(Snapshot{Job: job, Pods: []corev1.Pod{tc.pod}, Now: now})
			if a.FirstFailure == nil || a.FirstFailure.NodeEventName != tc.first || !strings.Contains(a.FirstFailure.Message, tc.inMsg) ||
				!strings.Contains(a.Suggestion, tc.inSugg) {
				t.Errorf("first failure %+v, suggestion %q; want %s with %q, %q", a.FirstFailure, a.Suggestion, tc.first, tc.inMsg, tc.inSugg)
			}
		})
	}
}

// A rank the supervisor ended as hung is named Hang, with what its termination message says
// (the rank silent first, the innermost frames) and where its stacks are.
func TestDiagnoseHang(t *testing.T) {
	p := stagedPod(podOf("t", 1).Node("gpu-node-1").Exited(204, "Error", t0.Add(time.Minute)).Val())
	p.Status.ContainerStatuses[0].State.Terminated.Message = "hang: no rank has printed a line, written a checkpoint file or kept a GPU busy for 30s " +
		"(the last sign of life at 10:00:00); rank 1 on node gpu-node-1 went silent first; this rank's innermost frames: <module> (/w/train.py:20)"
	job := jobOf("t", 2).Conditions(failedCond(batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", t0.Add(2*time.Minute))).Obj()
	a := Analyze(Snapshot{Job: job, Pods: []corev1.Pod{p}, Now: now})
	if a.FirstFailure == nil || a.FirstFailure.NodeEventName != Hang || !strings.Contains(a.FirstFailure.Message, "rank 1 on node gpu-node-1 went silent first") ||
		!strings.Contains(a.FirstFailure.Message, "<module> (/w/train.py:20)") || !strings.Contains(a.Suggestion, "kubectl tao logs t --rank 1 --attempt N") {
		t.Errorf("first failure %+v, suggestion %q", a.FirstFailure, a.Suggestion)
	}
	// A job that completed after its hang says it in a note.
	done := testJob("t", 2, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	if a := Analyze(Snapshot{Job: done, Pods: []corev1.Pod{p}, Now: now}); len(a.Notes) != 1 ||
		!strings.HasPrefix(a.Notes[0], "rank 1: pod "+p.Name+": Hang: exit code 204: the supervisor ended the command as hung: hang: ") {
		t.Errorf("notes of the completed job: %q", a.Notes)
	}
	// The same code from a command the supervisor does not run is the command's own.
	plain := podOf("t", 1).Node("gpu-node-1").Exited(204, "Error", t0.Add(time.Minute)).Val()
	if a := Analyze(Snapshot{Job: job, Pods: []corev1.Pod{plain}, Now: now}); a.FirstFailure == nil || a.FirstFailure.NodeEventName == Hang {
		t.Errorf("unsupervised 204: %+v", a.FirstFailure)
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
		{"evicted with 137: ignored first", podOf("t", 0).Node("a").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Val(), batchv1.PodFailurePolicyActionIgnore},
		{"OOM", podOf("t", 0).Node("a").Exited(137, "OOMKilled", t0.Add(time.Minute)).Val(), batchv1.PodFailurePolicyActionFailJob},
		{"command not found", podOf("t", 0).Node("a").Exited(127, "Error", t0.Add(time.Minute)).Val(), batchv1.PodFailurePolicyActionFailJob},
		{"traceback: counts", podOf("t", 0).Node("a").Exited(1, "Error", t0.Add(time.Minute)).Val(), ""},
		{"running: nothing", podOf("t", 0).Node("a").Running(t0.Add(time.Minute)).Val(), ""},
	}
	for _, tc := range tests {
		if got := policyAction(job, &tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := policyAction(testJob("t", 1), podOf("t", 0).Node("a").Exited(137, "Error", t0.Add(time.Minute)).Evicted("The node was low on resource: memory. ", t0.Add(time.Minute)).Obj()); got != "" {
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

// top shows the attempts the watchdog ended: only the supervisor's 204, oldest first.
func TestEndedHung(t *testing.T) {
	hung := stagedPod(podOf("t", 1).Node("n1").Exited(204, "Error", t0.Add(2*time.Minute)).Val())
	hung.Status.ContainerStatuses[0].State.Terminated.Message = "hang: ...; rank 1 on node n1 went silent first"
	earlier := stagedPod(podOf("t", 0).Node("n0").Exited(204, "Error", t0.Add(time.Minute)).Val())
	plain := podOf("t", 2).Node("n2").Exited(204, "Error", t0.Add(time.Minute)).Val()
	failed := stagedPod(podOf("t", 3).Node("n3").Exited(1, "Error", t0.Add(time.Minute)).Val())
	got := EndedHung([]corev1.Pod{hung, plain, failed, earlier}, "t")
	if len(got) != 2 || got[0].Rank != 0 || got[1].Rank != 1 || got[1].NodeEventName != Hang ||
		!strings.Contains(got[1].Message, "went silent first") || !strings.Contains(got[1].Suggestion, "kubectl tao logs t --rank 1 --attempt N") {
		t.Errorf("%+v", got)
	}
}

// Rank 0 of an MPI job that never reached the other pods' agents is named MPIUnreachable, with
// the pods its termination message names; the same code with no message, or from a pod of
// another job, is still a staging failure.
func TestDiagnoseMPIUnreachable(t *testing.T) {
	launcherPod := func(launcher, msg string) corev1.Pod {
		p := stagedPod(podOf("t", 0).Node("gpu-node-0").Exited(203, "Error", t0.Add(time.Minute)).Val())
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: jobspec.EnvLauncher, Value: launcher})
		p.Status.ContainerStatuses[0].State.Terminated.Message = msg
		return p
	}
	mpiPod := func(msg string) corev1.Pod { return launcherPod("mpi", msg) }
	const sshRefused = "checked for 1m0s: ssh did not reach 1 of the job's pods: t-1.t (root@t-1.t: Permission denied (publickey).)"
	const unreachable = "waited 10m0s for every pod's MPI agent: the MPI agent of 1 of the job's pods never answered: t-1.t (dial tcp: lookup t-1.t: no such host)"
	other := stagedPod(podOf("t", 0).Node("gpu-node-0").Exited(203, "Error", t0.Add(time.Minute)).Val())
	other.Status.ContainerStatuses[0].State.Terminated.Message = unreachable
	for _, tc := range []struct {
		name  string
		pod   corev1.Pod
		first string
		inMsg string
	}{
		{"MPI, agents never answered", mpiPod(unreachable), MPIUnreachable, "exit code 203: mpirun never ran: " + unreachable},
		{"MPI, no message", mpiPod(""), "StagingFailed", "exit code 203"},
		{"mpi-ssh, ssh refused", launcherPod("mpi-ssh", sshRefused), MPIUnreachable, "exit code 203: mpirun never ran: " + sshRefused},
		{"torchrun", other, "StagingFailed", "exit code 203"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := jobOf("t", 2).Conditions(failedCond(batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit", t0.Add(2*time.Minute))).Obj()
			a := Analyze(Snapshot{Job: job, Pods: []corev1.Pod{tc.pod}, Now: now})
			if a.FirstFailure == nil || a.FirstFailure.NodeEventName != tc.first || !strings.Contains(a.FirstFailure.Message, tc.inMsg) {
				t.Fatalf("first failure %+v; want %s with %q", a.FirstFailure, tc.first, tc.inMsg)
			}
			if tc.first == MPIUnreachable && (a.ErrClass == nil || *a.ErrClass != ErrInfra || !strings.Contains(a.Suggestion, "kubectl tao replicas t")) {
				t.Errorf("class %v, suggestion %q", a.ErrClass, a.Suggestion)
			}
		})
	}
}

// What OpenMPI 4.1's mpirun and MPICH 4.0's mpiexec print when a process or a pod's daemon of
// their world is gone (real runs: the real node's MPI tests, and both launchers on this host):
// the line named is the one with the pod.
func TestScanLogsMPIPeerLost(t *testing.T) {
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"OpenMPI, a daemon lost": {[]string{
			"--------------------------------------------------------------------------",
			"ORTE has lost communication with a remote daemon.",
			"",
			"  HNP daemon   : [[46749,0],0] on node lost-0",
			"  Remote daemon: [[46749,0],1] on node lost-1.lost",
			"",
			"This is usually due to either a failure of the TCP network",
			"Killed",
		}, "Remote daemon: [[46749,0],1] on node lost-1.lost"},
		"OpenMPI, a process killed": {[]string{
			"Primary job  terminated normally, but 1 process returned",
			"a non-zero exit code. Per user-direction, the job has been aborted.",
			"mpirun noticed that process rank 3 with PID 0 on node retried-1.retried exited on signal 9 (Killed).",
		}, "mpirun noticed that process rank 3 with PID 0 on node retried-1.retried exited on signal 9 (Killed)."},
		"MPICH": {[]string{
			"===================================================================================",
			"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
			"=   PID 11999 RUNNING AT hydra-1.hydra",
			"=   EXIT CODE: 9",
		}, "=   PID 11999 RUNNING AT hydra-1.hydra"},
	} {
		p, line := scanLogs(tc.lines)
		if p == nil || p.name != "MPIPeerLost" || line != tc.want {
			t.Errorf("%s: %v %q, want MPIPeerLost %q", name, p, line, tc.want)
		}
	}
}
