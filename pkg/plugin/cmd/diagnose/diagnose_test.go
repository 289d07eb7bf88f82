package diagnose_test

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

var (
	t0      = cmdtest.TriageT0
	now     = cmdtest.TriageNow
	job     = cmdtest.TriageJob
	cluster = cmdtest.TriageCluster
	backoff = cmdtest.TriageBackoff
)

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(context.Background(), args...)
}

func TestGoldens(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		golden     string
		wantStderr string
	}{
		{[]string{"diagnose", "oom"}, "diagnose-oom.txt", ""},
		{[]string{"diagnose", "oom", "-o", "json"}, "diagnose-oom.json", ""},
		{[]string{"diagnose", "img"}, "diagnose-image.txt", ""},
		{[]string{"diagnose", "half"}, "diagnose-partial.txt", ""},
		{[]string{"diagnose", "done"}, "diagnose-complete.txt", ""},
		{[]string{"diagnose", "done", "-o", "json"}, "diagnose-complete.json", ""},
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

func TestDiagnoseJSONIsTheSDKShape(t *testing.T) {
	r := run(t, cluster(), "diagnose", "oom", "-o", "json")
	var got struct {
		ErrClass   *string `json:"err_class"`
		Suggestion string  `json:"suggestion"`
		Events     []struct {
			Name     string `json:"node_event_name"`
			Node     string `json:"node"`
			Pod      string `json:"pod"`
			Rank     int    `json:"rank"`
			ExitCode *int   `json:"exit_code"`
			Message  string `json:"message"`
			Time     string `json:"time"`
		} `json:"job_failure_by_node_event"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.ErrClass == nil || *got.ErrClass != "ERR_PROGRAM" || !strings.HasPrefix(got.Suggestion, "Container OOM-killed. Reduce batch size") {
		t.Errorf("class %v, suggestion %q", got.ErrClass, got.Suggestion)
	}
	e := got.Events[0]
	if e.Name != "OOMKilled" || e.Node != "gpu-node-1" || e.Rank != 1 || e.ExitCode == nil || *e.ExitCode != 137 || e.Time != "2026-03-01T12:01:00Z" {
		t.Errorf("first event = %+v", e)
	}

	r = run(t, cluster(), "diagnose", "done", "-o", "jsonpath={.err_class}")
	if r.Code != 0 || r.Stdout != "null" {
		t.Errorf("jsonpath on a fine job = %q (exit %d)", r.Stdout, r.Code)
	}
}

func TestJobNotFound(t *testing.T) {
	for _, cmd := range []string{"diagnose"} {
		r := run(t, cluster(), cmd, "nope")
		if r.Code != int(exitcode.NotFound) || r.Stdout != "" || !strings.Contains(r.Stderr, `error: job "nope" not found in namespace "ml"`) {
			t.Errorf("%s nope: %+v", cmd, r)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"diagnose"}, {"diagnose", "a", "b"}, {"diagnose", "pod/x"}, {"diagnose", "oom", "-o", "wide"}, {"diagnose", "oom", "-o", "bogus"},
	} {
		r := run(t, fake.NewClientset(), args...)
		if r.Code != int(exitcode.Usage) || r.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a usage error", args, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// A job waiting in a Kueue queue has no pods: replicas and diagnose say why, from its Workload
// and its ClusterQueue's quota (waiting for 8 more GPUs), or that the quota can never hold it.
func TestQueuedGoldens(t *testing.T) {
	pending := map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending",
		"message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"}
	queued := job("train", 2).UID("uid-1").Label("kueue.x-k8s.io/queue-name", "team-a").Suspend(true).Obj()
	for _, tc := range []struct {
		args   []string
		quota  string
		golden string
	}{
		{[]string{"diagnose", "train"}, "16", "diagnose-queued.txt"},
		{[]string{"diagnose", "train", "-o", "json"}, "16", "diagnose-queued.json"},
		{[]string{"diagnose", "train"}, "8", "diagnose-inadmissible.txt"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			c, dyn := cmdtest.KueueQueued(queued.DeepCopy(), tc.quota, pending)
			r := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn, Now: now}.Run(context.Background(), tc.args...)
			if r.Code != 0 {
				t.Fatalf("exit %d, stderr %s", r.Code, r.Stderr)
			}
			// replicas has no pods to list: its explanation is the note on stderr.
			golden.Check(t, tc.golden, r.Stdout+"--- stderr\n"+r.Stderr)
		})
	}
}

// --silent-after must be more than 0: a usage error before anything is read.
func TestDiagnoseBadSilentAfter(t *testing.T) {
	c := cluster()
	r := run(t, c, "diagnose", "train", "--silent-after", "0s")
	if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, "--silent-after must be more than 0") || len(c.Actions()) != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q, requests %v", r.Code, r.Stdout, r.Stderr, c.Actions())
	}
}
