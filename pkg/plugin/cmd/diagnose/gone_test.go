package diagnose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// goneBucket is an S3 server whose objects are stamped by a clock the test moves, so that the
// archive's last writes (when each rank stopped) are the same in every run.
type goneBucket struct {
	*s3fake.Server
	env map[string]string
}

func newGoneBucket(t *testing.T) *goneBucket {
	t.Helper()
	srv := s3fake.Start(t, s3fake.Options{Bucket: "results", Now: t0})
	return &goneBucket{Server: srv, env: srv.Env()}
}

// put archives body as the log of rank's attempt in pod of run uid of job, written at.
func (b *goneBucket) put(t *testing.T, job, uid string, rank int, pod, body string, at time.Time) {
	t.Helper()
	b.Clock.Advance(at.Sub(b.Clock.Now()))
	prefix, _ := s3layout.ResultsPrefix(job, uid)
	b.Put(s3layout.LogArchiveKey(prefix, rank, pod), body)
}

const goneOOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"

// A Job that no longer exists (deleted, TTL'd): diagnose reads its run's log archive alone, with
// the shell's credentials or --s3-secret, and says so in the report and in -o json.
func TestDiagnoseAJobThatIsGone(t *testing.T) {
	b := newGoneBucket(t)
	// Rank 1 ran out of GPU memory first (its second attempt); rank 0 then lost NCCL.
	b.put(t, "gone", "run-2", 1, "gone-1-aaa", "step 1\n", t0.Add(30*time.Second))
	b.put(t, "gone", "run-2", 1, "gone-1-bbb", steps(12)+goneOOM+"\nexiting\n", t0.Add(time.Minute))
	b.put(t, "gone", "run-2", 0, "gone-0-aaa", "step 1\nstep 2\n[rank0] ProcessGroupNCCL watchdog: collective operation timed out\n", t0.Add(2*time.Minute))
	ctx := context.Background()
	cmd := cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(), Env: b.env, Now: now}

	for _, tc := range []struct {
		args   []string
		golden string
	}{
		{[]string{"diagnose", "gone"}, "diagnose-gone.txt"},
		{[]string{"diagnose", "gone", "--uid", "run-2"}, "diagnose-gone.txt"},
		{[]string{"diagnose", "gone", "-o", "json"}, "diagnose-gone.json"},
	} {
		r := cmd.Run(ctx, tc.args...)
		if r.Code != 0 || r.Stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, r.Code, r.Stderr)
		}
		golden.Check(t, tc.golden, r.Stdout)
	}
	var got struct {
		ErrClass *string `json:"err_class"`
		Status   string  `json:"status"`
		Archive  *struct {
			UID         string `json:"uid"`
			JobGone     bool   `json:"job_gone"`
			FirstToStop *int   `json:"first_to_stop"`
		} `json:"archive"`
	}
	r := cmd.Run(ctx, "diagnose", "gone", "-o", "json")
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.ErrClass == nil || *got.ErrClass != "ERR_PROGRAM" || got.Status != "Unknown" || got.Archive == nil ||
		got.Archive.UID != "run-2" || !got.Archive.JobGone || got.Archive.FirstToStop == nil || *got.Archive.FirstToStop != 1 {
		t.Errorf("json: %s", r.Stdout)
	}

	// The Job's own Secret went with it: --s3-secret names another.
	noEnv := cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(fixture.Secret("ml", "team-s3", b.env)), Now: now}
	if r := noEnv.Run(ctx, "diagnose", "gone", "--s3-secret", "team-s3"); r.Code != 0 || !strings.Contains(r.Stdout, "What happened: rank 1: CUDAOutOfMemory") {
		t.Errorf("--s3-secret: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// No credentials anywhere: still the Job's NotFound, saying how to read the archive.
	if r := noEnv.Run(ctx, "diagnose", "gone"); r.Code != int(exitcode.NotFound) || r.Stdout != "" ||
		!strings.Contains(r.Stderr, `error: job "gone" not found in namespace "ml"`) || !strings.Contains(r.Stderr, "or name a Secret with --s3-secret") {
		t.Errorf("no credentials: %+v", r)
	}
	// A run that is not there, and a name without any run: NotFound.
	if r := cmd.Run(ctx, "diagnose", "gone", "--uid", "run-9"); r.Code != int(exitcode.NotFound) || r.Stdout != "" ||
		!strings.Contains(r.Stderr, `error: job "gone" not found in namespace "ml", and no archived logs under s3://results/results/gone/run-9/.kubectl-tao/logs/`) {
		t.Errorf("wrong --uid: %+v", r)
	}
	if r := cmd.Run(ctx, "diagnose", "never"); r.Code != int(exitcode.NotFound) || r.Stdout != "" ||
		!strings.Contains(r.Stderr, "job.batch/never not found, and it has no results under s3://results/results/never/") {
		t.Errorf("no run: %+v", r)
	}
	// replicas is about live pods: a Job that is gone is NotFound, archive or not.
	if r := cmd.Run(ctx, "replicas", "gone"); r.Code != int(exitcode.NotFound) {
		t.Errorf("replicas: %+v", r)
	}

	// A second run of the name: without --uid, the error lists both, as logs and results do.
	b.put(t, "gone", "run-3", 0, "gone-0-ccc", "fine\n", t0.Add(5*time.Minute))
	r = cmd.Run(ctx, "diagnose", "gone")
	if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, "has 2 runs") ||
		!strings.Contains(r.Stderr, "--uid run-2") || !strings.Contains(r.Stderr, "--uid run-3") {
		t.Errorf("several runs: %+v", r)
	}
	golden.Check(t, "diagnose-gone.txt", cmd.Run(ctx, "diagnose", "gone", "--uid", "run-2").Stdout)

	// The name reused by a live Job: --uid of the older run still reads that run's archive alone.
	live := job("gone", 1).UID("run-4").Obj()
	r = cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(live), Env: b.env, Now: now}.Run(ctx, "diagnose", "gone", "--uid", "run-3")
	if r.Code != 0 || !strings.Contains(r.Stdout, "this is the diagnosis of run run-3 from its log archive alone") ||
		!strings.Contains(r.Stdout, "No known error in the archived logs.") {
		t.Errorf("older run of a live name: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}

// steps is n numbered lines of training progress.
func steps(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "step %d\n", i)
	}
	return b.String()
}

func TestDiagnoseUIDIsChecked(t *testing.T) {
	for _, uid := range []string{"../x", "a/b", "."} {
		r := run(t, fake.NewClientset(), "diagnose", "gone", "--uid", uid)
		if r.Code != int(exitcode.Usage) || r.Stdout != "" || !strings.Contains(r.Stderr, "--uid") {
			t.Errorf("--uid %q: %+v", uid, r)
		}
	}
}
