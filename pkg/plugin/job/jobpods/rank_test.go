package jobpods

import (
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

// ddp is the Job whose pods the tests resolve: Indexed, two ranks of one container "tao".
func ddp() *fixture.JobWrapper {
	return fixture.Job("ddp").Namespace("ml").UID("uid-ddp").Indexed().Completions(2).Container(corev1.Container{Name: "tao"})
}

func TestResolve(t *testing.T) {
	three := []corev1.Pod{
		fixture.RankPod(ddp().Obj(), 0).Name("ddp-0-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodRunning).Val(),
		fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-old").Created(t0.Add(-time.Hour)).Phase(corev1.PodFailed).Val(),
		fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-new").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Val(),
		fixture.RankPod(ddp().Obj(), 2).Name("ddp-2-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodPending).Val(),
	}
	tests := []struct {
		name     string
		ranks    int
		pods     []corev1.Pod
		rank     int
		want     string
		wantCode exitcode.Code
		wantMsg  []string
	}{
		{name: "rank 0", ranks: 3, pods: three, rank: 0, want: "ddp-0-a"},
		{name: "a replaced pod: the running one", ranks: 3, pods: three, rank: 1, want: "ddp-1-new"},
		{name: "a terminating pod loses to its running replacement, even an older one", ranks: 2, pods: []corev1.Pod{
			fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodRunning).Val(),
			fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-b").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Deleting(t0).Val(),
		}, rank: 1, want: "ddp-1-a"},
		{name: "two running pods: the newest", ranks: 2, pods: []corev1.Pod{
			fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodRunning).Val(),
			fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-b").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Val(),
		}, rank: 1, want: "ddp-1-b"},
		{name: "only a terminating pod runs: it is still the one", ranks: 1, pods: []corev1.Pod{
			fixture.RankPod(ddp().Obj(), 0).Name("ddp-x").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Deleting(t0).Val(),
		}, rank: 0, want: "ddp-x"},
		{name: "a non-indexed job's pod is rank 0", ranks: 1, pods: []corev1.Pod{fixture.RankPod(ddp().Obj(), -1).Name("one-x").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Val()}, rank: 0, want: "one-x"},
		{name: "rank outside the job", ranks: 3, pods: three, rank: 3, wantCode: exitcode.NotFound,
			wantMsg: []string{"job.batch/ddp has no rank 3: its ranks are 0..2", "ranks: 0 Running, 1 Failed+Running, 2 Pending"}},
		{name: "rank 1 of a one-rank job", ranks: 1, pods: []corev1.Pod{fixture.RankPod(ddp().Obj(), -1).Name("one-x").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Val()}, rank: 1,
			wantCode: exitcode.NotFound, wantMsg: []string{"its ranks are 0 only", "ranks: 0 Running"}},
		{name: "pending rank", ranks: 3, pods: three, rank: 2, wantCode: exitcode.Error,
			wantMsg: []string{"rank 2 of job.batch/ddp is not running (pod ddp-2-a Pending)", "ranks: 0 Running, 1 Failed+Running, 2 Pending"}},
		{name: "finished rank", ranks: 1, pods: []corev1.Pod{fixture.RankPod(ddp().Obj(), 0).Name("ddp-0-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodSucceeded).Val()}, rank: 0,
			wantCode: exitcode.Error, wantMsg: []string{"is not running (pod ddp-0-a Succeeded)"}},
		{name: "a rank without a pod", ranks: 3, pods: three[:1], rank: 2, wantCode: exitcode.NotFound,
			wantMsg: []string{"rank 2 of job.batch/ddp has no pod (yet); ranks: 0 Running"}},
		{name: "no pods at all", ranks: 2, pods: nil, rank: 0, wantCode: exitcode.NotFound,
			wantMsg: []string{"the job has no pods yet (suspended, queued or just created)"}},
		{name: "a terminating pod is named so", ranks: 1, pods: []corev1.Pod{fixture.RankPod(ddp().Obj(), 0).Name("ddp-0-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodSucceeded).Deleting(t0).Val()}, rank: 0,
			wantCode: exitcode.Error, wantMsg: []string{"(pod ddp-0-a Terminating)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve("ddp", tc.ranks, tc.pods, tc.rank)
			if tc.want != "" {
				if err != nil || got.Name != tc.want {
					t.Fatalf("Resolve = %v, %v; want pod %s", got, err, tc.want)
				}
				return
			}
			if err == nil || exitcode.Of(err) != tc.wantCode {
				t.Fatalf("Resolve = %v (exit %d), want exit %d", err, exitcode.Of(err), tc.wantCode)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q lacks %q", err, m)
				}
			}
		})
	}
}

func TestSummaryIsBounded(t *testing.T) {
	var pods []corev1.Pod
	for r := 0; r < 40; r++ {
		p := fixture.RankPod(ddp().Obj(), 0).Name("p").Created(t0.Add(-time.Minute)).Phase(corev1.PodRunning).Val()
		p.Annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(r)
		pods = append(pods, p)
	}
	_, err := Resolve("big", 40, pods, 41)
	if err == nil || !strings.Contains(err.Error(), "15 Running, ... 24 more") {
		t.Fatalf("error %v", err)
	}
}

func TestRanks(t *testing.T) {
	indexed := &batchv1.Job{Spec: batchv1.JobSpec{CompletionMode: ptr.To(batchv1.IndexedCompletion), Completions: ptr.To[int32](4)}}
	if Ranks(indexed) != 4 || Ranks(&batchv1.Job{}) != 1 {
		t.Fatalf("Ranks = %d, %d", Ranks(indexed), Ranks(&batchv1.Job{}))
	}
}
