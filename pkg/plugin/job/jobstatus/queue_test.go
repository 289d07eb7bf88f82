package jobstatus

import (
	"testing"

	"k8s.io/utils/ptr"
)

func TestQueueStateDescribe(t *testing.T) {
	full := &QueueState{LocalQueue: "team-a", ClusterQueue: "cq", LocalQueuePending: 2, ClusterQueuePending: ptr.To[int32](3),
		ClusterQueueAdmitted: ptr.To[int32](1), GPUs: 16, Flavors: []FlavorQuota{{Flavor: "a100", Nominal: 8}, {Flavor: "h100", Nominal: 16, Used: 16}}}
	tests := []struct {
		name string
		q    *QueueState
		want string
	}{
		{"nil", nil, ""},
		{"no ClusterQueue", &QueueState{LocalQueue: "team-a"}, ""},
		{"all known", full, "ClusterQueue cq: 0 of 8 nvidia.com/gpu used in flavor a100, 16 of 16 nvidia.com/gpu used in flavor h100, " +
			"the job needs 16; 2 pending in team-a, 3 in cq, 1 admitted"},
		{"ClusterQueue not readable", &QueueState{LocalQueue: "team-a", ClusterQueue: "cq", LocalQueuePending: 1, GPUs: 8},
			"ClusterQueue cq; 1 pending in team-a"},
		// Kueue's positions are 0-based; people read them 1-based.
		{"with its position", positioned(full, 1, 2), "ClusterQueue cq: 0 of 8 nvidia.com/gpu used in flavor a100, 16 of 16 nvidia.com/gpu used in flavor h100, " +
			"the job needs 16; position 2 of 2 pending in team-a, 3 of 3 in cq, 1 admitted"},
		{"position, ClusterQueue not readable", positioned(&QueueState{LocalQueue: "team-a", ClusterQueue: "cq", LocalQueuePending: 1, GPUs: 8}, 0, 4),
			"ClusterQueue cq; position 1 of 1 pending in team-a, position 5 in cq"},
		// The queues' status lags (a stopped ClusterQueue's counts stay 0): the job itself is
		// pending, so its position bounds the count from below.
		{"counts behind the positions", positioned(&QueueState{LocalQueue: "team-a", ClusterQueue: "cq", ClusterQueuePending: ptr.To[int32](0),
			ClusterQueueAdmitted: ptr.To[int32](0), GPUs: 16}, 0, 1), "ClusterQueue cq; position 1 of 1 pending in team-a, 2 of 2 in cq, 0 admitted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.q.Describe(); got != tc.want {
				t.Errorf("Describe() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if f := (FlavorQuota{Nominal: 16, Used: 24}); f.Free() != 0 {
		t.Errorf("Free() of a borrowing flavor = %d, want 0", f.Free())
	}
}

// positioned is a copy of q with its positions set (0-based, as Kueue gives them).
func positioned(q *QueueState, inLocal, inCluster int32) *QueueState {
	c := *q
	c.SetPosition(&Position{LocalQueue: inLocal, ClusterQueue: inCluster})
	return &c
}

func TestQueueStateHeld(t *testing.T) {
	cqHold := QueueStop{Kind: "ClusterQueue", Name: "cq", Policy: "Hold"}
	lqDrain := QueueStop{Kind: "LocalQueue", Name: "team-a", Policy: "HoldAndDrain"}
	noFlavor := &QueueInactive{Reason: "FlavorNotFound", Message: "Can't admit new workloads: references missing ResourceFlavor(s): [gone]."}
	tests := []struct {
		name string
		q    *QueueState
		want string
	}{
		{"nil", nil, ""},
		{"nothing holds it", &QueueState{LocalQueue: "team-a", ClusterQueue: "cq", Stopped: []QueueStop{}}, ""},
		{"ClusterQueue stopped", &QueueState{ClusterQueue: "cq", Stopped: []QueueStop{cqHold}},
			"ClusterQueue cq is stopped (Hold): nothing is admitted until an admin resumes it"},
		{"both stopped", &QueueState{ClusterQueue: "cq", Stopped: []QueueStop{cqHold, lqDrain}},
			"ClusterQueue cq is stopped (Hold) and LocalQueue team-a is stopped (HoldAndDrain): nothing is admitted until an admin resumes them"},
		{"inactive", &QueueState{ClusterQueue: "cq", Inactive: noFlavor},
			"ClusterQueue cq is inactive (FlavorNotFound: Can't admit new workloads: references missing ResourceFlavor(s): [gone].): " +
				"nothing is admitted until an admin fixes it"},
		{"stopped and inactive", &QueueState{ClusterQueue: "cq", Stopped: []QueueStop{lqDrain}, Inactive: noFlavor},
			"LocalQueue team-a is stopped (HoldAndDrain) and ClusterQueue cq is inactive (FlavorNotFound: Can't admit new workloads: " +
				"references missing ResourceFlavor(s): [gone].): nothing is admitted until an admin resumes and fixes them"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.q.Held(); got != tc.want {
				t.Errorf("Held() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
