package jobwait

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// TestUntilStuck: a rank whose image cannot be pulled is said once on progress, however often
// its pod changes, and the wait ends with Stuck after StuckTimeout, printing no final status.
func TestUntilStuck(t *testing.T) {
	job := fixture.Job("train").Namespace("ml").Nodes(2).DefaultSelector().Container(corev1.Container{Name: "tao", Image: "local/nonexistent:1"}).Obj()
	running := fixture.RankPod(job, 0).Node("n").Running(time.Now()).Obj()
	stuck := fixture.RankPod(job, 1).Node("n").Waiting("ErrImagePull", "pull failed").Obj()
	c := fake.NewClientset(job, running, stuck)
	progress := &testbuf.Buffer{}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := Until(context.Background(), c, Target{Namespace: "ml", Name: "train"}, Options{StuckTimeout: 2 * time.Second}, progress)
		done <- err
	}()
	// The kubelet's back-off rewrites the pod while the wait goes on: the same issue, said once.
	for i, reason := range []string{"ImagePullBackOff", "ErrImagePull", "ImagePullBackOff"} {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(progress.String(), "cannot start"); {
			if time.Now().After(deadline) {
				t.Fatalf("nothing said after 10s:\n%s", progress.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		p := stuck.DeepCopy()
		if i%2 == 0 {
			p.Status.ContainerStatuses[0].State.Waiting.Message = "back-off " + reason
		}
		p.Status.ContainerStatuses[0].State.Waiting.Reason = reason
		if _, err := c.CoreV1().Pods("ml").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Until did not give up")
	}
	if exitcode.Of(err) != exitcode.Stuck {
		t.Fatalf("err = %v (exit code %d), want Stuck", err, exitcode.Of(err))
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("gave up after %s, before --stuck-timeout", took)
	}
	lines := 0
	for _, l := range strings.Split(progress.String(), "\n") {
		if strings.Contains(l, "cannot start") {
			lines++
			if !strings.HasPrefix(l, "rank 1 (pod train-1-") || !strings.HasSuffix(l, "; see why: kubectl tao diagnose train -n ml") {
				t.Errorf("line = %q", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("said %d lines, want 1:\n%s", lines, progress.String())
	}
}

// TestUntilNotAdmitted: a queued job whose Workload Kueue will never admit ends the wait at
// once with NotAdmitted and Kueue's reason; a Workload still waiting for quota does not.
func TestUntilNotAdmitted(t *testing.T) {
	job := fixture.Job("train").Namespace("ml").Label(jobstatus.QueueLabel, "team-a").Suspend(true).DefaultSelector().Obj()
	for _, tc := range []struct {
		name string
		wl   *jobstatus.Workload
		want exitcode.Code
	}{
		{"never fits", &jobstatus.Workload{NeverFits: "LocalQueue team-a points at ClusterQueue gone, which does not exist"}, exitcode.NotAdmitted},
		{"deactivated", &jobstatus.Workload{Inactive: true, EvictedMessage: "exceeded the PodsReady timeout"}, exitcode.NotAdmitted},
		{"waiting for quota", &jobstatus.Workload{Pending: "couldn't assign flavors: insufficient unused quota"}, exitcode.Timeout},
		{"ClusterQueue stopped: the wait goes on", &jobstatus.Workload{Pending: "ClusterQueue cq is stopped", Queue: &jobstatus.QueueState{
			LocalQueue: "team-a", ClusterQueue: "cq", Stopped: []jobstatus.QueueStop{{Kind: "ClusterQueue", Name: "cq", Policy: "Hold"}}}}, exitcode.Timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(job.DeepCopy())
			progress := &testbuf.Buffer{}
			read := func(context.Context, *batchv1.Job) (*jobstatus.Workload, error) { return tc.wl, nil }
			_, err := Until(context.Background(), c, Target{Namespace: "ml", Name: "train"},
				Options{Timeout: time.Second, StuckTimeout: time.Millisecond, Workload: read}, progress)
			if exitcode.Of(err) != tc.want {
				t.Fatalf("err = %v (exit code %d), want %d; progress:\n%s", err, exitcode.Of(err), tc.want, progress.String())
			}
			if tc.want == exitcode.NotAdmitted && !strings.Contains(err.Error(), "will not be admitted by Kueue") {
				t.Errorf("err = %v", err)
			}
			if tc.want == exitcode.Timeout && strings.Count(progress.String(), "queued in LocalQueue team-a") != 1 {
				t.Errorf("progress:\n%s\nwant the queue said once", progress.String())
			}
			if held := tc.wl.Queue.Held(); held != "" && !strings.Contains(progress.String(), held) {
				t.Errorf("progress:\n%s\nwant %q", progress.String(), held)
			}
		})
	}
}
