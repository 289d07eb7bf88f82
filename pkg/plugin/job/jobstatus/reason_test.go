package jobstatus

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestWithWorkload(t *testing.T) {
	queued := func() *batchv1.Job {
		return fixture.Job("train").Nodes(2).Label(QueueLabel, "team-a").Suspend(true).Obj()
	}
	admitted := fixture.Job("train").Nodes(2).Label(QueueLabel, "team-a").Suspend(false).Obj()
	stoppedQueue := &QueueState{LocalQueue: "team-a", ClusterQueue: "cq", GPUs: 16, Flavors: []FlavorQuota{{Flavor: "h100", Nominal: 16}},
		Stopped: []QueueStop{{Kind: "ClusterQueue", Name: "cq", Policy: "Hold"}}}
	failed := queued()
	failed.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded"}}
	tests := []struct {
		name    string
		job     *batchv1.Job
		wl      *Workload
		status  Status
		reason  Reason
		message string
	}{
		{"no Workload yet", queued(), nil, Pending, Queued, "queued in team-a"},
		{"waiting for quota", queued(), &Workload{Pending: "insufficient unused quota, 16 more needed"}, Pending, Queued, "queued in team-a: insufficient unused quota, 16 more needed"},
		{"preempted", queued(), &Workload{EvictedReason: "Preempted", EvictedMessage: "Preempted to accommodate a workload", Pending: "16 more needed"},
			Pending, Preempted, "preempted and requeued in team-a: Preempted to accommodate a workload"},
		{"evicted otherwise is queued", queued(), &Workload{EvictedReason: "PodsReadyTimeout", Pending: "16 more needed"}, Pending, Queued, "queued in team-a: 16 more needed"},
		{"never fits", queued(), &Workload{NeverFits: "needs 24 but at most 16", Pending: "maximum capacity (16)"}, Pending, Inadmissible, "needs 24 but at most 16"},
		{"deactivated wins", queued(), &Workload{Inactive: true, NeverFits: "x", EvictedReason: "DeactivatedDueToRequeuingLimitExceeded", EvictedMessage: "deactivated after 2 requeues"},
			Pending, Deactivated, "deactivated after 2 requeues"},
		{"ClusterQueue stopped: still Queued, the stop first", queued(), &Workload{Pending: "ClusterQueue cq is stopped", Queue: stoppedQueue},
			Pending, Queued, "queued in team-a: ClusterQueue cq is stopped (Hold): nothing is admitted until an admin resumes it; ClusterQueue cq: 0 of 16"},
		{"ClusterQueue inactive", queued(), &Workload{Queue: &QueueState{LocalQueue: "team-a", ClusterQueue: "cq",
			Inactive: &QueueInactive{Reason: "FlavorNotFound", Message: "references missing ResourceFlavor(s)"}}},
			Pending, Queued, "queued in team-a: ClusterQueue cq is inactive (FlavorNotFound: references missing ResourceFlavor(s)): nothing is admitted until an admin fixes it"},
		{"stopped after a preemption", queued(), &Workload{EvictedReason: "Preempted", EvictedMessage: "for a higher priority", Queue: stoppedQueue},
			Pending, Preempted, "preempted and requeued in team-a: for a higher priority; ClusterQueue cq is stopped (Hold)"},
		{"a stopped queue never fits: Inadmissible wins", queued(), &Workload{NeverFits: "needs 24 but at most 16", Queue: stoppedQueue},
			Pending, Inadmissible, "needs 24 but at most 16"},
		{"admitted: no reason", admitted, &Workload{Pending: "stale"}, Pending, "", "0/2 ranks running"},
		{"terminal: no reason", failed, &Workload{Inactive: true}, Error, "", "DeadlineExceeded"},
		{"not queued", fixture.Job("train").Nodes(2).Suspend(true).Obj(), &Workload{Inactive: true}, Pending, "", "0/2 ranks running"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := WithWorkload(Of(tc.job, nil), tc.job, tc.wl)
			if r.Status != tc.status || r.Reason != tc.reason || !strings.Contains(r.Message, tc.message) {
				t.Errorf("got %s/%q %q, want %s/%q %q", r.Status, r.Reason, r.Message, tc.status, tc.reason, tc.message)
			}
			want := string(tc.status)
			if tc.reason != "" {
				want = string(tc.reason)
			}
			if held := strings.Contains(r.Message, "nothing is admitted until"); (r.Held != "") != held || !strings.Contains(r.Message, r.Held) {
				t.Errorf("Held = %q with message %q", r.Held, r.Message)
			}
			if r.Shown() != want {
				t.Errorf("Shown() = %s, want %s", r.Shown(), want)
			}
		})
	}
}

// A queued job's LocalQueue position (Kueue's, 0-based) shows 1-based in STATUS; a job that is
// not waiting its turn shows none, whatever its Workload says.
func TestShownWithPosition(t *testing.T) {
	queued := fixture.Job("train").Nodes(2).Label(QueueLabel, "team-a").Suspend(true).Obj()
	admitted := fixture.Job("train").Nodes(2).Label(QueueLabel, "team-a").Suspend(false).Obj()
	second := &Position{LocalQueue: 1, ClusterQueue: 3}
	tests := []struct {
		name string
		job  *batchv1.Job
		wl   *Workload
		want string
	}{
		{"queued, position known", queued, &Workload{Pending: "16 more needed", Position: second}, "Queued:2"},
		{"queued first", queued, &Workload{Position: &Position{}}, "Queued:1"},
		{"queued, position unknown", queued, &Workload{Pending: "16 more needed"}, "Queued"},
		{"preempted and requeued", queued, &Workload{EvictedReason: "Preempted", Position: second}, "Preempted:2"},
		{"never fits: no turn to wait for", queued, &Workload{NeverFits: "needs 24", Position: second}, "Inadmissible"},
		{"deactivated", queued, &Workload{Inactive: true, Position: second}, "Deactivated"},
		{"admitted", admitted, &Workload{Position: second}, "Pending"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := WithWorkload(Of(tc.job, nil), tc.job, tc.wl)
			if got := r.Shown(); got != tc.want {
				t.Errorf("Shown() = %s, want %s", got, tc.want)
			}
		})
	}
}
