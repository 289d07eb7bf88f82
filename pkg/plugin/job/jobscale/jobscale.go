// Package jobscale resizes an elastic job (`kubectl tao scale`): it checks the new size against
// the job's MIN:MAX and the cluster, sets completions and parallelism together in one patch
// bound to the Job's UID, and can wait until the job runs and trains at that size. It never
// prints.
package jobscale

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobcreate"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Size is a job's current size and its range.
type Size struct {
	Ranks, Min, Max int
}

// Check refuses a size n the job cannot take: a job of fixed size, a finished one, or n outside
// its MIN:MAX. All are usage errors: nothing was changed.
func Check(job *batchv1.Job, n int) (Size, error) {
	minN, maxN, ok := jobspec.NodesRange(job)
	if !ok {
		return Size{}, exitcode.Usagef("job.batch/%s is not elastic: it was submitted with --nodes N, and only a job submitted with --nodes MIN:MAX can be scaled", job.Name)
	}
	size := Size{Ranks: int(ptr.Deref(job.Spec.Completions, 0)), Min: minN, Max: maxN}
	if st := jobstatus.Of(job, nil); st.Status == jobstatus.Complete || st.Status == jobstatus.Error {
		return size, exitcode.Usagef("job.batch/%s has finished (%s): there is nothing to scale", job.Name, st.Status)
	}
	if err := jobspec.ValidateScale(n, minN, maxN); err != nil {
		return size, exitcode.WithCode(exitcode.Usage, err)
	}
	return size, nil
}

// CheckCapacity refuses a size the cluster's allocatable GPUs can never hold (submit's guard,
// for the Job's pod template at n ranks); warning says why nothing was checked, if so.
func CheckCapacity(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, n int) (warning string, err error) {
	req := gpufit.RequestForJob(job, n)
	if req.GPUsPerPod() == 0 {
		return "", nil
	}
	return jobcreate.CheckRequest(ctx, client, req)
}

// Scale sets the job's completions and parallelism to n in one JSON patch that first tests the
// Job's UID, so that a Job of the same name made since is never resized. The API server keeps
// index 0 when it removes indexes, and the Job controller starts the new ones.
func Scale(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, n int) (*batchv1.Job, error) {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": string(job.UID)},
		{"op": "replace", "path": "/spec/parallelism", "value": n},
		{"op": "replace", "path": "/spec/completions", "value": n},
	})
	if err != nil {
		return nil, err
	}
	out, err := client.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-tao"})
	if err != nil {
		return nil, fmt.Errorf("scaling job.batch/%s to %s: %w", job.Name, plural.N(n, "rank"), err)
	}
	return out, nil
}

// WaitRunning waits until n ranks of the job run and are ready and no removed one is left
// (status.ready and status.active both n), polling the Job every interval. It returns the
// Job as last read; ctx bounds the wait.
func WaitRunning(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, n int, interval time.Duration) (*batchv1.Job, error) {
	last := job
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		got, err := client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if got.UID != job.UID {
			return false, fmt.Errorf("job.batch/%s was replaced by another Job of the same name", job.Name)
		}
		last = got
		if st := jobstatus.Of(got, nil); st.Status == jobstatus.Complete || st.Status == jobstatus.Error {
			return false, fmt.Errorf("job.batch/%s finished (%s) before it ran at %s", job.Name, st.Status, plural.N(n, "rank"))
		}
		return int(ptr.Deref(got.Status.Ready, 0)) == n && int(got.Status.Active) == n, nil
	})
	return last, err
}

// worldSize matches what torchrun's elastic agent logs each time its workers start: the number
// of agents (ranks' pods) in the world, "group_world_size=3" in its rendezvous result.
var worldSize = regexp.MustCompile(`\bgroup_world_size=(\d+)`)

// LastWorldSize is the world size of the last rendezvous in log, -1 when it has none.
func LastWorldSize(log string) int {
	m := worldSize.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return -1
	}
	n, err := strconv.Atoi(m[len(m)-1][1])
	if err != nil {
		return -1
	}
	return n
}

// WaitTrained waits until torchrun's agent in rank 0's pod, which never leaves, has logged a
// rendezvous at world size n since since: its workers then train at that size. It reads rank
// 0's log from since (one list of the job's pods and one log request per poll).
func WaitTrained(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, n int, since metav1.Time, interval time.Duration) (last int, err error) {
	last = -1
	err = wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: jobpods.UIDSelector(job.UID)})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if jobpods.Rank(p) != 0 || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			raw, err := client.CoreV1().Pods(job.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: jobspec.ContainerName, SinceTime: &since}).DoRaw(ctx)
			if err != nil {
				return false, nil
			}
			if w := LastWorldSize(string(raw)); w >= 0 {
				last = w
			}
			return last == n, nil
		}
		return false, nil
	})
	return last, err
}
