package triage

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// TestReadinessIssues covers every rule of replicas: each case is one pod (rank 0 of job
// "train"), with the events and nodes the rule reads.
func TestReadinessIssues(t *testing.T) {
	pending := podOf("train", 0).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val()
	ipb := podOf("train", 0).Node("gpu-node-1").Waiting("ImagePullBackOff", `Back-off pulling image "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt": ErrImagePull: unauthorized`).Val()
	ipbSecret := podOf("train", 0).PullSecret("ngc").Node("gpu-node-1").Waiting("ErrImagePull", "").Val()
	mount := podOf("train", 0).Node("gpu-node-1").Waiting("ContainerCreating", "").Val()
	eventOnly := podOf("train", 0).Val()
	tests := []struct {
		name        string
		pod         corev1.Pod
		events      func(p corev1.Pod) []corev1.Event
		nodes       []*corev1.Node
		wantReason  string
		wantMessage []string // fragments
	}{
		{name: "running and ready", pod: podOf("train", 0).Node("gpu-node-1").Running(t0.Add(time.Minute)).Val()},
		{name: "succeeded", pod: podOf("train", 0).Node("gpu-node-1").Succeeded(t0.Add(5 * time.Minute)).Val()},
		{name: "scheduled, container creating, no events", pod: podOf("train", 0).Node("gpu-node-1").Waiting("ContainerCreating", "").Val()},
		{name: "just created", pod: podOf("train", 0).Val()},
		{
			name: "insufficient GPUs: the scheduler's own message", pod: pending,
			wantReason: "Unschedulable", wantMessage: []string{msgNoGPU},
		},
		{
			name: "unschedulable from the FailedScheduling event alone", pod: eventOnly,
			events: func(p corev1.Pod) []corev1.Event {
				return []corev1.Event{fixture.PodEvent(&p, "FailedScheduling", msgNoGPU).Last(t0.Add(time.Second)).Val()}
			},
			wantReason: "Unschedulable", wantMessage: []string{"4 Insufficient nvidia.com/gpu"},
		},
		{
			name: "node selector matches nothing", pod: podOf("train", 0).NodeSelector("foo", "bar").Unschedulable(msgNoMatch, t0.Add(time.Second)).Val(),
			wantReason: "NoMatchingNode", wantMessage: []string{"no node matches the node selector foo=bar", msgNoMatch},
		},
		{
			name: "some nodes match the selector but lack GPUs: not NoMatchingNode", pod: podOf("train", 0).NodeSelector("foo", "bar").Unschedulable(msgMixed, t0.Add(time.Second)).Val(),
			wantReason: "Unschedulable", wantMessage: []string{msgMixed},
		},
		{
			name: "PVC not bound", pod: podOf("train", 0).Unschedulable(msgPVC, t0.Add(time.Second)).Val(),
			wantReason: "PersistentVolumeClaimNotBound", wantMessage: []string{"unbound immediate PersistentVolumeClaims"},
		},
		{
			name: "untolerated taint", pod: podOf("train", 0).Unschedulable(msgTaint, t0.Add(time.Second)).Val(),
			wantReason: "UntoleratedTaint", wantMessage: []string{"untolerated taint {nvidia.com/gpu: present}"},
		},
		{
			name: "ImagePullBackOff names the image and the missing pull secret", pod: ipb,
			wantReason:  "ImagePullBackOff",
			wantMessage: []string{`Back-off pulling image "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt"`, `no image pull secret set`},
		},
		{
			name: "ErrImagePull with a pull secret that does not exist", pod: ipbSecret,
			events: func(p corev1.Pod) []corev1.Event {
				return []corev1.Event{
					fixture.PodEvent(&p, "FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (ngc); attempting to pull the image may not succeed.").Last(t0.Add(time.Second)).Val(),
					fixture.PodEvent(&p, "Failed", `Failed to pull image "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt": unauthorized`).Last(t0.Add(2 * time.Second)).Val(),
				}
			},
			wantReason:  "ErrImagePull",
			wantMessage: []string{"Failed to pull image", "image pull secret ngc", "Unable to retrieve some image pull secrets (ngc)"},
		},
		{
			name: "missing Secret: CreateContainerConfigError", pod: podOf("train", 0).Node("gpu-node-1").Waiting("CreateContainerConfigError", `secret "s3-creds" not found`).Val(),
			wantReason: "CreateContainerConfigError", wantMessage: []string{`secret "s3-creds" not found`},
		},
		{
			name: "missing ConfigMap key", pod: podOf("train", 0).Node("gpu-node-1").Waiting("CreateContainerConfigError", `couldn't find key spec in ConfigMap ml/specs`).Val(),
			wantReason: "CreateContainerConfigError", wantMessage: []string{"couldn't find key spec in ConfigMap ml/specs"},
		},
		{
			name: "volume mount failure", pod: mount,
			events: func(p corev1.Pod) []corev1.Event {
				return []corev1.Event{fixture.PodEvent(&p, "FailedMount", `MountVolume.SetUp failed for volume "data" : persistentvolumeclaim "data" not found`).Last(t0.Add(time.Minute)).Val()}
			},
			wantReason: "FailedMount", wantMessage: []string{`persistentvolumeclaim "data" not found`},
		},
		{
			name: "CrashLoopBackOff with the last exit", pod: func() corev1.Pod {
				p := podOf("train", 0).Node("gpu-node-1").Waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=tao pod=train-0-abcde_ml").Val()
				p.Status.ContainerStatuses[0].RestartCount = 4
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 139, Reason: "Error"}
				return p
			}(),
			wantReason: "CrashLoopBackOff", wantMessage: []string{"back-off 5m0s", "last exit: Error: exit code 139 (SIGSEGV)"},
		},
		{
			name: "running on a NotReady node", pod: podOf("train", 0).Node("gpu-node-2").Running(t0.Add(time.Minute)).NotReady().Val(),
			nodes:      []*corev1.Node{fixture.Node("gpu-node-2").Ready(corev1.ConditionUnknown, "Kubelet stopped posting node status.", t0.Add(2*time.Minute)).Obj()},
			wantReason: "NodeNotReady", wantMessage: []string{"node gpu-node-2 is NotReady (its kubelet stopped reporting): Kubelet stopped posting node status."},
		},
		{
			name: "stuck terminating on a lost node", pod: podOf("train", 0).Node("gpu-node-2").Running(t0.Add(time.Minute)).Deleting(now.Add(-5 * time.Minute)).Val(),
			nodes:      []*corev1.Node{fixture.Node("gpu-node-2").Ready(corev1.ConditionUnknown, "Kubelet stopped posting node status.", t0.Add(2*time.Minute)).Obj()},
			wantReason: "Terminating", wantMessage: []string{"still terminating 5m0s after its grace period", "node gpu-node-2 is NotReady"},
		},
		{name: "terminating within its grace period", pod: podOf("train", 0).Node("gpu-node-2").Running(t0.Add(time.Minute)).Deleting(now.Add(20 * time.Second)).Val()},
		{
			name: "OOMKilled", pod: podOf("train", 0).Node("gpu-node-1").Exited(137, "OOMKilled", t0.Add(time.Minute)).Val(),
			wantReason: "OOMKilled", wantMessage: []string{"exit code 137 (SIGKILL)"},
		},
		{
			name: "non-zero exit with signal", pod: podOf("train", 0).Node("gpu-node-1").Exited(134, "Error", t0.Add(time.Minute)).Val(),
			wantReason: "Error", wantMessage: []string{"exit code 134 (SIGABRT)"},
		},
		{
			name: "evicted under memory pressure", pod: func() corev1.Pod {
				p := podOf("train", 0).Node("gpu-node-3").Val()
				p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
				p.Status.Message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi."
				return p
			}(),
			nodes:      []*corev1.Node{fixture.Node("gpu-node-3").Ready(corev1.ConditionTrue, "", t0.Add(2*time.Minute)).Condition(corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}).Obj()},
			wantReason: "Evicted", wantMessage: []string{"low on resource: memory", "node gpu-node-3 has MemoryPressure"},
		},
		{
			name: "preempted", pod: podOf("train", 0).Node("gpu-node-1").Exited(143, "Error", t0.Add(3*time.Minute)).Disrupted("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod", t0.Add(2*time.Minute)).Val(),
			wantReason: "Preempted", wantMessage: []string{"PreemptionByScheduler: default-scheduler: preempting"},
		},
		{
			name: "scheduling gated", pod: func() corev1.Pod {
				p := podOf("train", 0).Val()
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}
				return p
			}(),
			wantReason: "SchedulingGated", wantMessage: []string{"kueue.x-k8s.io/admission"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Snapshot{Job: testJob("train", 1), Pods: []corev1.Pod{tc.pod}, Now: now, Nodes: map[string]*corev1.Node{}}
			if tc.events != nil {
				s.Events = tc.events(tc.pod)
			}
			for _, n := range tc.nodes {
				s.Nodes[n.Name] = n
			}
			reps, _ := Replicas(s)
			if len(reps) != 1 {
				t.Fatalf("got %d replicas", len(reps))
			}
			got := reps[0].Status.ReadinessIssue
			if tc.wantReason == "" {
				if got != nil {
					t.Fatalf("readiness issue = %+v, want none", *got)
				}
				return
			}
			if got == nil {
				t.Fatalf("no readiness issue, want %s", tc.wantReason)
			}
			if got.Reason != tc.wantReason {
				t.Errorf("reason = %q, want %q (message %q)", got.Reason, tc.wantReason, got.Message)
			}
			for _, m := range tc.wantMessage {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message = %q, want it to contain %q", got.Message, m)
				}
			}
		})
	}
}

func TestReplicasOrderAndColumns(t *testing.T) {
	s := Snapshot{Job: testJob("ddp", 3), Now: now, Pods: []corev1.Pod{
		podOf("ddp", 2).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val(),
		podOf("ddp", 0).Node("gpu-node-0").Running(t0.Add(time.Minute)).Val(),
		podOf("ddp", 1).Node("gpu-node-1").Running(t0.Add(time.Minute)).Val(),
	}}
	s.Pods[1].Status.ContainerStatuses[0].RestartCount = 2
	reps, notes := Replicas(s)
	var got []string
	for _, r := range reps {
		got = append(got, r.Name+"|"+r.Node+"|"+r.Phase+"|"+r.Ready)
	}
	want := "ddp-0-abcde|gpu-node-0|Running|1/1 ddp-1-abcde|gpu-node-1|Running|1/1 ddp-2-abcde||Pending|0/1"
	if strings.Join(got, " ") != want {
		t.Errorf("replicas = %v, want %s", got, want)
	}
	if reps[0].Restarts != 2 || reps[0].Rank != 0 || reps[2].Rank != 2 {
		t.Errorf("restarts/ranks wrong: %+v", reps)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "partial start: 2 of 3 ranks running, 1 pending (rank 2 (Unschedulable))") {
		t.Errorf("notes = %q, want a partial start", notes)
	}
}

func TestNoPartialStartWhenAllPendingOrAllRunning(t *testing.T) {
	for name, pods := range map[string][]corev1.Pod{
		"all pending":           {podOf("ddp", 0).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val(), podOf("ddp", 1).Unschedulable(msgNoGPU, t0.Add(time.Second)).Val()},
		"all running":           {podOf("ddp", 0).Node("a").Running(t0.Add(time.Minute)).Val(), podOf("ddp", 1).Node("b").Running(t0.Add(time.Minute)).Val()},
		"one done, one running": {podOf("ddp", 0).Node("a").Succeeded(t0.Add(5 * time.Minute)).Val(), podOf("ddp", 1).Node("b").Running(t0.Add(time.Minute)).Val()},
	} {
		if _, notes := Replicas(Snapshot{Job: testJob("ddp", 2), Pods: pods, Now: now}); len(notes) != 0 {
			t.Errorf("%s: notes = %q, want none", name, notes)
		}
	}
}

func TestFailedCreateIsAJobNote(t *testing.T) {
	job := testJob("train", 1)
	ev := corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Job", Name: "train", UID: job.UID}, Type: "Warning",
		Reason: "FailedCreate", Message: `Error creating: pods "train-0-x" is forbidden: exceeded quota: gpu-quota`}
	_, notes := Replicas(Snapshot{Job: job, Events: []corev1.Event{ev}, Now: now})
	if len(notes) != 1 || !strings.Contains(notes[0], "exceeded quota: gpu-quota") {
		t.Errorf("notes = %q", notes)
	}
}

func TestEventsOfOtherPodsAreIgnored(t *testing.T) {
	mine := podOf("train", 0).Val()
	other := podOf("other", 0).Val()
	s := Snapshot{Job: testJob("train", 1), Pods: []corev1.Pod{mine}, Now: now,
		Events: []corev1.Event{fixture.PodEvent(&other, "FailedScheduling", msgNoGPU).Last(t0.Add(time.Second)).Val()}}
	if reps, _ := Replicas(s); reps[0].Status.ReadinessIssue != nil {
		t.Errorf("another pod's event gave this pod an issue: %+v", reps[0].Status.ReadinessIssue)
	}
}

func TestSignals(t *testing.T) {
	for code, want := range map[int32]string{
		137: "exit code 137 (SIGKILL)", 139: "exit code 139 (SIGSEGV)", 143: "exit code 143 (SIGTERM)",
		134: "exit code 134 (SIGABRT)", 135: "exit code 135 (SIGBUS)", 136: "exit code 136 (SIGFPE)",
		130: "exit code 130 (SIGINT)", 1: "exit code 1", 2: "exit code 2", 128: "exit code 128", 255: "exit code 255",
	} {
		if got := describeExit(code); got != want {
			t.Errorf("describeExit(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestParseScheduler(t *testing.T) {
	sm, ok := parseScheduler(msgMixed)
	if !ok || sm.total != 4 || sm.reasons["Insufficient nvidia.com/gpu"] != 2 || sm.reasons["node(s) didn't match Pod's node affinity/selector"] != 2 {
		t.Fatalf("parseScheduler(mixed) = %+v, %v", sm, ok)
	}
	if sm.everyNode("didn't match Pod's node affinity/selector") {
		t.Error("2 of 4 nodes counted as every node")
	}
	if sm, _ := parseScheduler(msgNoMatch); !sm.everyNode("didn't match Pod's node affinity/selector") {
		t.Errorf("4 of 4 not every node: %+v", sm)
	}
	if _, ok := parseScheduler("pod has unbound immediate PersistentVolumeClaims"); ok {
		t.Error("parsed a message without the 0/N prefix")
	}
}
