package prune_test

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func run(t *testing.T, c *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	r := cmdtest.Cmd{Client: c, Now: now}.Run(context.Background(), args...)
	return r.Code, r.Stdout, r.Stderr
}

func TestPruneUsage(t *testing.T) {
	for _, args := range [][]string{{"prune"}, {"prune", "x", "--older-than", "1h"}, {"prune", "--older-than", "-1h"}, {"prune", "--older-than", "1h", "--dry-run=maybe"}} {
		if code, _, _ := run(t, fake.NewClientset(), args...); code != int(exitcode.Usage) {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestPrune(t *testing.T) {
	objs := []runtime.Object{
		fixture.Job("old-ok").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Finished(batchv1.JobComplete, now.Add(-48*time.Hour)).Obj(),
		fixture.Job("old-failed").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Finished(batchv1.JobFailed, now.Add(-30*time.Hour)).Obj(),
		fixture.Job("recent").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Finished(batchv1.JobComplete, now.Add(-time.Hour)).Obj(),
		fixture.Job("running").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj(),
		// Incomplete submits count from their creation: the old one goes, the recent one stays.
		cmdtest.IncompleteSubmit("old-incomplete", now.Add(-40*time.Hour)),
		cmdtest.IncompleteSubmit("new-incomplete", now.Add(-time.Hour)),
	}
	c := fake.NewClientset(objs...)
	code, out, _ := run(t, c, "prune", "--older-than", "24h", "--dry-run")
	if code != 0 || out != "job.batch/old-ok pruned (dry run)\njob.batch/old-incomplete pruned (dry run)\njob.batch/old-failed pruned (dry run)\n" {
		t.Fatalf("dry run: exit %d, stdout %q", code, out)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatal("client dry run deleted something")
		}
	}
	code, out, _ = run(t, c, "prune", "--older-than", "24h")
	if code != 0 || out != "job.batch/old-ok pruned\njob.batch/old-incomplete pruned\njob.batch/old-failed pruned\n" {
		t.Fatalf("prune: exit %d, stdout %q", code, out)
	}
	left, _ := c.BatchV1().Jobs("default").List(context.Background(), metav1.ListOptions{})
	if len(left.Items) != 3 {
		t.Fatalf("%d jobs left, want recent, running and new-incomplete", len(left.Items))
	}
}
