package logs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// train is the Job whose logs the tests read: three ranks of one container "main".
func train() *fixture.JobWrapper {
	return fixture.Job("train").Namespace("ns").UID("job-uid").Completions(3).Container(corev1.Container{Name: "main"})
}

// client is a fake clientset whose log endpoint answers every pod with the same two lines
// (the fake does not say which pod is asked), with timestamps when requested; logRequests
// records the options of each log request.
func client(objs ...runtime.Object) (*fake.Clientset, *[]corev1.PodLogOptions) {
	c := fake.NewClientset(objs...)
	var reqs []corev1.PodLogOptions
	c.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "log" {
			return false, nil, nil
		}
		opts := a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions)
		reqs = append(reqs, *opts)
		body := "step 1\nstep 2\n"
		if opts.Timestamps {
			body = "2026-11-29T18:55:02.1Z step 1\n2026-11-29T18:55:02.2Z step 2\n"
		}
		return true, &runtime.Unknown{Raw: []byte(body)}, nil
	})
	return c, &reqs
}

func run(t *testing.T, c *fake.Clientset, args ...string) cmdtest.Result {
	t.Helper()
	return cmdtest.Cmd{NS: "ns", Client: c, RandomName: "x7k2p"}.Run(context.Background(), append([]string{"logs"}, args...)...)
}

func TestLogsCommand(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantOut    string
		wantErr    string
		wantCode   exitcode.Code
		wantLogReq string
	}{
		{"every rank in rank order", []string{"train"},
			"[rank 0] step 1\n[rank 0] step 2\n[rank 1] step 1\n[rank 1] step 2\n",
			"rank 2 (pod train-2-abcde): no log yet, the container has not started\n", 0, "{Container:main}"},
		{"job.batch/NAME, one rank, no prefix", []string{"job.batch/train", "--rank", "1", "--no-prefix"},
			"step 1\nstep 2\n", "", 0, "{Container:main}"},
		{"pod prefix, tail, since, timestamps", []string{"train", "--rank=0", "--prefix", "--tail", "5", "--since", "90s", "--timestamps"},
			"[pod/train-0-abcde] 2026-11-29T18:55:02.1Z step 1\n[pod/train-0-abcde] 2026-11-29T18:55:02.2Z step 2\n", "", 0,
			"{Container:main Timestamps:true TailLines:5 SinceSeconds:90}"},
		{"missing job", []string{"nope"}, "", `error: jobs.batch "nope" not found in namespace "ns"` + "\n", exitcode.NotFound, ""},
		{"bad prefix", []string{"train", "--prefix=node"}, "", "error: --prefix must be rank or pod, got \"node\"\nSee 'kubectl tao logs --help' for usage.\n", exitcode.Usage, ""},
		{"prefix and no-prefix", []string{"train", "--prefix=pod", "--no-prefix"}, "", "error: --prefix and --no-prefix cannot be used together\nSee 'kubectl tao logs --help' for usage.\n", exitcode.Usage, ""},
		{"bad tail", []string{"train", "--tail=-2"}, "", "error: --tail must be -1 (all) or at least 0, got -2\nSee 'kubectl tao logs --help' for usage.\n", exitcode.Usage, ""},
		{"bad rank", []string{"train", "--rank=-1"}, "", "error: --rank must be 0 or more, got -1\nSee 'kubectl tao logs --help' for usage.\n", exitcode.Usage, ""},
		{"no job", nil, "", "error: expected one JOB (NAME, job/NAME or job.batch/NAME), got 0 arguments\nSee 'kubectl tao logs --help' for usage.\n", exitcode.Usage, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, reqs := client(train().Obj(), fixture.RankPod(train().Obj(), 2).Waiting("ContainerCreating", "").Obj(), fixture.RankPod(train().Obj(), 1).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj())
			r := run(t, c, tc.args...)
			if r.Code != int(tc.wantCode) || r.Stdout != tc.wantOut || r.Stderr != tc.wantErr {
				t.Fatalf("got exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr, tc.wantCode, tc.wantOut, tc.wantErr)
			}
			if tc.wantLogReq != "" && fmtOpts((*reqs)[0]) != tc.wantLogReq {
				t.Errorf("log request %s, want %s", fmtOpts((*reqs)[0]), tc.wantLogReq)
			}
		})
	}
}

func fmtOpts(o corev1.PodLogOptions) string {
	var parts []string
	parts = append(parts, "Container:"+o.Container)
	if o.Timestamps {
		parts = append(parts, "Timestamps:true")
	}
	if o.TailLines != nil {
		parts = append(parts, fmt.Sprintf("TailLines:%d", *o.TailLines))
	}
	if o.SinceSeconds != nil {
		parts = append(parts, fmt.Sprintf("SinceSeconds:%d", *o.SinceSeconds))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func TestLogsRequestsOneListNoPerPodGets(t *testing.T) {
	c, reqs := client(train().Obj(), fixture.RankPod(train().Obj(), 2).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 1).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj())
	if r := run(t, c, "train"); r.Code != 0 {
		t.Fatalf("%+v", r)
	}
	counts := map[string]int{}
	for _, a := range c.Actions() {
		counts[a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource()]++
	}
	want := map[string]int{"get jobs/": 1, "list pods/": 1, "get pods/log": 3}
	if fmt.Sprint(counts) != fmt.Sprint(want) || len(*reqs) != 3 {
		t.Fatalf("API requests %v, want %v", counts, want)
	}
}

func TestLogsFollowExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		job      *batchv1.Job
		wantCode exitcode.Code
		wantErr  string
	}{
		{"complete", train().Condition(batchv1.JobComplete, "PodFailurePolicy", "rank 1 OOMKilled").Obj(), exitcode.OK, ""},
		{"failed", train().Condition(batchv1.JobFailed, "PodFailurePolicy", "rank 1 OOMKilled").Obj(), exitcode.JobFailed, "error: job.batch/train failed: PodFailurePolicy: rank 1 OOMKilled\n"},
		{"canceled", train().Deleting(time.Now()).Obj(), exitcode.JobCanceled, "error: job.batch/train was canceled: the Job is being deleted\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := client(tc.job, fixture.RankPod(train().Obj(), 1).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj())
			r := run(t, c, "-f", "train")
			want := "[rank 0] step 1\n[rank 0] step 2\n[rank 1] step 1\n[rank 1] step 2\n"
			if r.Code != int(tc.wantCode) || r.Stdout != want || r.Stderr != tc.wantErr {
				t.Fatalf("got %+v", r)
			}
			// One mapping: kubectl tao wait ends the same job with the same code and error.
			c, _ = client(tc.job)
			w := cmdtest.Cmd{NS: "ns", Client: c}.Run(context.Background(), "wait", "train")
			if w.Code != r.Code || !strings.HasSuffix(w.Stderr, r.Stderr) {
				t.Errorf("wait: exit %d, stderr %q; logs -f: exit %d, stderr %q", w.Code, w.Stderr, r.Code, r.Stderr)
			}
		})
	}
}
