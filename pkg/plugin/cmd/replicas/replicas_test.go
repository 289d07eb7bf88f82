package replicas_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

const msgNoGPU = cmdtest.MsgNoGPU

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{NS: "ml", Client: c, Now: cmdtest.TriageNow}.Run(context.Background(), args...)
}

func cluster() *fake.Clientset { return cmdtest.TriageCluster() }

func TestGoldens(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		golden     string
		wantStderr string
	}{
		{[]string{"replicas", "half"}, "replicas-partial.txt", "Warning: job half: partial start: 1 of 2 ranks running, 1 pending (rank 1 (Unschedulable))"},
		{[]string{"replicas", "half", "-o", "json"}, "replicas-partial.json", "partial start"},
		{[]string{"replicas", "half", "-o", "yaml"}, "replicas-partial.yaml", "partial start"},
		{[]string{"replicas", "job/img"}, "replicas-image.txt", ""},
		{[]string{"replicas", "oom", "-o", "name"}, "replicas-oom.name", ""},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, cluster(), tc.args...)
			if r.Code != 0 {
				t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, tc.wantStderr) || (tc.wantStderr == "" && r.Stderr != "") {
				t.Errorf("stderr = %q, want %q", r.Stderr, tc.wantStderr)
			}
			golden.Check(t, tc.golden, r.Stdout)
		})
	}
}

// TestReplicasJSONIsTheSDKShape checks the exact keys a script written for the SDK reads.
func TestReplicasJSONIsTheSDKShape(t *testing.T) {
	r := run(t, cluster(), "replicas", "half", "-o", "json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, r.Stdout)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries", len(got))
	}
	for _, e := range got {
		var keys []string
		for k := range e {
			keys = append(keys, k)
		}
		if len(keys) != 5 || e["name"] == nil || e["rank"] == nil || e["phase"] == nil || e["status"] == nil {
			t.Errorf("entry keys = %v, want exactly name, rank, node, phase, status", keys)
		}
	}
	if got[0]["status"].(map[string]any)["readiness_issue"] != nil {
		t.Errorf("the running rank has an issue: %v", got[0])
	}
	issue := got[1]["status"].(map[string]any)["readiness_issue"].(map[string]any)
	if issue["reason"] != "Unschedulable" || issue["message"] != msgNoGPU {
		t.Errorf("rank 1 issue = %v", issue)
	}
}

func TestJobNotFound(t *testing.T) {
	r := run(t, cluster(), "replicas", "nope")
	if r.Code != int(exitcode.NotFound) || r.Stdout != "" || !strings.Contains(r.Stderr, `error: job "nope" not found in namespace "ml"`) {
		t.Errorf("replicas nope: %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"replicas"}, {"replicas", "a", "b"}, {"replicas", "pod/x"}, {"replicas", "half", "-o", "bogus"}} {
		r := run(t, fake.NewClientset(), args...)
		if r.Code != int(exitcode.Usage) || r.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error", args, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// A job waiting in a Kueue queue has no pods: replicas says why on stderr, from its Workload and
// its ClusterQueue's quota (waiting for 8 more GPUs).
func TestQueuedGolden(t *testing.T) {
	pending := map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending",
		"message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"}
	queued := cmdtest.TriageJob("train", 2).UID("uid-1").Label("kueue.x-k8s.io/queue-name", "team-a").Suspend(true).Obj()
	c, dyn := cmdtest.KueueQueued(queued, "16", pending)
	r := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: cmdtest.TriageNow}.Run(context.Background(), "replicas", "train")
	if r.Code != 0 {
		t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
	}
	golden.Check(t, "replicas-queued.txt", r.Stdout+"--- stderr\n"+r.Stderr)
}
