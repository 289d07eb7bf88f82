package delete_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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

func TestDeleteUsage(t *testing.T) {
	for _, args := range [][]string{{"delete"}, {"delete", "pod/x"}, {"delete", "x", "--timeout", "-1s"}, {"delete", "x", "--grace-period", "-5"}} {
		if code, _, _ := run(t, fake.NewClientset(), args...); code != int(exitcode.Usage) {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestDeleteRefusesRunningJobs(t *testing.T) {
	c := fake.NewClientset(fixture.Job("busy").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj(), fixture.Job("done").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Condition(batchv1.JobFailed, "", "").Obj())
	code, _, errOut := run(t, c, "delete", "busy")
	if code != int(exitcode.Error) || !strings.Contains(errOut, "is Pending, not finished: cancel it") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := run(t, c, "delete", "done")
	if code != 0 || out != "job.batch/done deleted\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// delete removes a Job whose submit never finished, as the IncompleteSubmit message says; one
// still inside the submit grace (its submit may be running) is refused like any pending job.
func TestDeleteIncompleteSubmit(t *testing.T) {
	c := fake.NewClientset(cmdtest.IncompleteSubmit("left", now.Add(-10*time.Minute)), cmdtest.IncompleteSubmit("starting", now.Add(-5*time.Second)))
	code, out, errOut := run(t, c, "delete", "left", "--wait=false")
	if code != 0 || out != "job.batch/left deleted (deletion requested; pods may still be stopping)\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var deleted []string
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			deleted = append(deleted, d.Name)
			if p := d.DeleteOptions.PropagationPolicy; p == nil || *p != metav1.DeletePropagationForeground || d.DeleteOptions.Preconditions == nil {
				t.Errorf("delete of %s: options %+v, want foreground and UID-bound", d.Name, d.DeleteOptions)
			}
		}
	}
	if strings.Join(deleted, ",") != "left" {
		t.Errorf("deleted %v, want left", deleted)
	}
	code, _, errOut = run(t, c, "delete", "starting")
	if code != int(exitcode.Error) || !strings.Contains(errOut, "is Pending, not finished") {
		t.Fatalf("a submit still running: exit %d, stderr %q", code, errOut)
	}
}
