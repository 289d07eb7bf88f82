// Package jobdelete deletes a Job the way `cancel`, `delete`, `prune` and `delete-artifacts`
// need: UID-bound foreground deletes that report success only once the Job's pods, the
// writers, are gone.
package jobdelete

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	batchclient "k8s.io/client-go/kubernetes/typed/batch/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
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
// watches (no polling). An API server that stops answering meanwhile (restarted, down, 429 or
// 503) is waited out quietly, told through rep in one line when it goes and one when it is
// back; the timeout still holds. On timeout it names the pods that remain.
func WaitGone(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, timeout time.Duration, rep *outage.Reporter) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// client-go logs a watch cut mid-body as an error; rep says what the user needs instead.
	ctx = outage.QuietContext(ctx)
	jobs := client.BatchV1().Jobs(job.Namespace)
	pods := client.CoreV1().Pods(job.Namespace)
	// By UID, not name: a new Job of the same name must not hold up the wait for this one's pods.
	podSel := jobpods.UIDSelector(job.UID)
	jobSel := fields.OneTermEqualSelector("metadata.name", job.Name).String()
	backoff := outage.Backoff(200*time.Millisecond, 5*time.Second)
	var remaining []corev1.Pod
	for {
		jobList, err := jobs.List(ctx, metav1.ListOptions{FieldSelector: jobSel})
		if err == nil {
			var podRV string
			left := map[types.UID]corev1.Pod{}
			podRV, err = pages.Each(ctx, metav1.ListOptions{LabelSelector: podSel, Limit: podPage}, pods.List, func(page *corev1.PodList) {
				for _, p := range page.Items {
					left[p.UID] = p
				}
			})
			if err == nil {
				rep.OK()
				backoff = outage.Backoff(200*time.Millisecond, 5*time.Second)
				w := &gone{job: job, jobThere: slices.ContainsFunc(jobList.Items, func(j batchv1.Job) bool { return j.UID == job.UID }), left: left}
				if w.done() {
					return nil
				}
				var done bool
				done, err = w.follow(ctx, jobs, pods, jobSel, podSel, jobList.ResourceVersion, podRV)
				remaining = w.pods()
				if done {
					return nil
				}
				if err == nil {
					continue // a watch ended: list again
				}
			}
		}
		if ctx.Err() != nil {
			return waitErr(ctx, job, remaining, timeout, ctx.Err())
		}
		// An outage is waited out (after a pause); any other error, or the end of ctx, ends
		// the wait.
		if !rep.Wait(ctx, err, backoff) {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return waitErr(ctx, job, remaining, timeout, err)
		}
	}
}

// podPage bounds one page of a pod list: a 1,000-rank job is listed in two.
const podPage = 500

// gone is what WaitGone knows of a Job being deleted: whether it is still there and which of
// its pods are.
type gone struct {
	job      *batchv1.Job
	jobThere bool
	left     map[types.UID]corev1.Pod
}

func (g *gone) done() bool { return !g.jobThere && len(g.left) == 0 }

func (g *gone) pods() []corev1.Pod {
	out := make([]corev1.Pod, 0, len(g.left))
	for _, p := range g.left {
		out = append(out, p)
	}
	return out
}

// follow watches the Job and its pods from the lists' versions, keeping g up to date from the
// events alone (one list, then one event per change: a 1,000-pod job is not listed again at
// each pod's deletion), until both are gone (true), a watch ends (false, nil: the caller lists
// again) or fails, or ctx ends (its error).
func (g *gone) follow(ctx context.Context, jobs batchclient.JobInterface, pods coreclient.PodInterface, jobSel, podSel, jobRV, podRV string) (bool, error) {
	jw, err := jobs.Watch(ctx, metav1.ListOptions{FieldSelector: jobSel, ResourceVersion: jobRV})
	if err != nil {
		return false, err
	}
	defer jw.Stop()
	pw, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: podSel, ResourceVersion: podRV})
	if err != nil {
		return false, err
	}
	defer pw.Stop()
	for {
		select {
		case ev, ok := <-jw.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			if j, isJob := ev.Object.(*batchv1.Job); isJob && j.UID == g.job.UID {
				g.jobThere = ev.Type != watch.Deleted
			}
		case ev, ok := <-pw.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod {
				if ev.Type == watch.Deleted {
					delete(g.left, p.UID)
				} else {
					g.left[p.UID] = *p
				}
			}
		case <-ctx.Done():
			return false, ctx.Err()
		}
		if g.done() {
			return true, nil
		}
	}
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
