// Package jobdelete deletes a Job the way `cancel`, `delete`, `prune` and `delete-artifacts`
// need: UID-bound foreground deletes that report success only once the Job's pods, the
// writers, are gone.
package jobdelete

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwatch"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// DefaultTimeout bounds how long cancel and delete wait for the pods to go. Pods get 30 s to
// stop by default, so five minutes leaves room for slow nodes without hanging a script forever.
const DefaultTimeout = 5 * time.Minute

// DeleteJob deletes exactly the Job with uid, in the foreground (the garbage collector removes
// its pods and owned children before the Job itself disappears). A same-name Job with another
// UID makes the precondition fail with a Conflict, and is never touched.
func DeleteJob(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, gracePeriod *int64, dryRun bool) error {
	opts := metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: ptr.To(job.UID)},
		PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	err := client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, opts)
	switch {
	case apierrors.IsConflict(err):
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s was replaced by another Job of the same name (uid %s is gone); the new one was left alone", job.Name, job.UID))
	case apierrors.IsNotFound(err):
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s is already gone", job.Name))
	case err != nil:
		return fmt.Errorf("deleting job.batch/%s: %w", job.Name, err)
	}
	if gracePeriod != nil {
		// The Job's own grace period does not reach its pods: the garbage collector deletes them
		// with theirs. Pass it on explicitly, pod by pod, selecting only this Job's pods by UID.
		pods, err := jobpods.ListOf(ctx, client, job)
		if err != nil {
			return fmt.Errorf("listing the pods of job.batch/%s: %w", job.Name, err)
		}
		for _, p := range pods {
			err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
				GracePeriodSeconds: gracePeriod, Preconditions: &metav1.Preconditions{UID: ptr.To(p.UID)},
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting pod/%s with --grace-period: %w", p.Name, err)
			}
		}
	}
	return nil
}

// WaitGone blocks until the Job with job's UID and all its pods are gone, following both with
// jobwatch (one list, then one event per change: a 1,000-pod job is not listed again at each
// pod's deletion; no polling). An API server that stops answering meanwhile (restarted, down,
// 429 or 503) is waited out quietly, told through rep in one line when it goes and one when it
// is back; the timeout still holds. Any other failure ends the wait. On timeout it names the
// pods that remain.
func WaitGone(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, timeout time.Duration, rep *outage.Reporter) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	w := jobwatch.Job{Client: client, Namespace: job.Namespace, Name: job.Name,
		// By UID, not name: a new Job of the same name must not hold up the wait for this one's pods.
		PodSelector: jobpods.UIDSelector(job.UID),
		Retry:       jobwatch.Retry{Reach: rep, Backoff: func() *wait.Backoff { return outage.Backoff(200*time.Millisecond, 5*time.Second) }},
		Fatal:       func(err error, _ bool) bool { return !outage.Is(err) },
	}
	st := jobwatch.NewState(job.Name)
	// One list of each first: a Job already gone needs no watch. A list that failed is made
	// again by the engine, which waits out an outage.
	jobs, jobRV, pods, podRV, jobErr, podErr := w.List(ctx)
	for _, err := range []error{jobErr, podErr} {
		if err != nil && !outage.Is(err) {
			return waitErr(ctx, job, nil, timeout, err)
		}
	}
	if jobErr == nil {
		st.SetJobs(jobs)
	} else {
		rep.Failed(jobErr)
	}
	if podErr == nil {
		st.SetPods(pods)
	} else {
		rep.Failed(podErr)
	}
	if gone(st, job) {
		return nil
	}
	// A stream whose list failed lists again ("") before it watches.
	if jobErr != nil {
		jobRV = ""
	}
	if podErr != nil {
		podRV = ""
	}
	updates := w.Start(watchCtx, jobRV, podRV)
	for {
		select {
		case <-ctx.Done():
			return waitErr(ctx, job, remaining(st), timeout, ctx.Err())
		case u := <-updates:
			if u.Err == nil {
				st.Apply(u)
				u.Err = st.Drain(updates)
			}
			if u.Err != nil {
				return waitErr(ctx, job, remaining(st), timeout, u.Err)
			}
		}
		if gone(st, job) {
			return nil
		}
	}
}

// gone reports whether st shows the Job with job's UID and all its pods gone.
func gone(st *jobwatch.State, job *batchv1.Job) bool {
	jobThere := st.Job != nil && st.Job.UID == job.UID
	return st.JobListed && st.PodsListed && !jobThere && len(st.Pods) == 0
}

// remaining is the pods st still knows.
func remaining(st *jobwatch.State) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(st.Pods))
	for _, p := range st.Pods {
		out = append(out, *p)
	}
	return out
}

func waitErr(ctx context.Context, job *batchv1.Job, remaining []corev1.Pod, timeout time.Duration, err error) error {
	if ctx.Err() == context.DeadlineExceeded {
		return exitcode.WithCode(exitcode.Timeout, fmt.Errorf("job.batch/%s: still deleting after %s; %s", job.Name, timeout, Remaining(remaining)))
	}
	return fmt.Errorf("waiting for job.batch/%s to be gone: %w", job.Name, err)
}

// Remaining describes the pods still there, for a timeout message.
func Remaining(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "its pods are gone but the Job object remains (finalizers?)"
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	var parts []string
	for _, p := range pods {
		where := p.Spec.NodeName
		if where == "" {
			where = "no node"
		}
		state := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			state = "Terminating"
		}
		parts = append(parts, fmt.Sprintf("%s (%s on %s)", p.Name, state, where))
	}
	return fmt.Sprintf("%s %s: %s", plural.N(len(pods), "pod"), plural.Word(len(pods), "remains", "remain"), strings.Join(parts, ", "))
}

// GetJob reads a Job, turning NotFound into a clear message with the NotFound exit code.
func GetJob(ctx context.Context, client kubernetes.Interface, ns, name string) (*batchv1.Job, error) {
	job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s not found in namespace %q", name, ns))
	}
	if err != nil {
		return nil, fmt.Errorf("reading job.batch/%s: %w", name, err)
	}
	return job, nil
}
