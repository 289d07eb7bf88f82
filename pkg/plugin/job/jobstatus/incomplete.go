package jobstatus

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// IncompleteSubmit: kubectl-tao created the Job suspended and its submit never finished (the
// process was killed between its steps, or its rollback failed). Nothing will ever start it.
const IncompleteSubmit Reason = "IncompleteSubmit"

// SubmitGrace is how old an unfinished submit's Job must be before it counts as
// IncompleteSubmit. A submit that is still running leaves its Job in the same state for the
// second or two between creating it and starting it; calling it incomplete then would send a
// user to delete a job that is about to start. 30 s is well past a normal submit (a handful of
// creates and one patch) and matches the bound of submit's own rollback, so a submit whose
// rollback runs is done with it by then. A submit still uploading a large --workdir to S3 can
// take longer: the message says so.
const SubmitGrace = 30 * time.Second

// SubmitUnfinished reports whether job is one that a submit created and has not finished: made
// by kubectl-tao, still carrying jobspec.SubmittingAnnotation (which the step that starts the
// Job removes), suspended, not labelled for a Kueue queue and not being deleted. A Job a user
// suspended on purpose lacks the annotation; a queued one has its label.
func SubmitUnfinished(job *batchv1.Job) bool {
	if job == nil || job.DeletionTimestamp != nil {
		return false
	}
	_, marked := job.Annotations[jobspec.SubmittingAnnotation]
	return marked && job.Labels[jobspec.ManagedByLabel] == jobspec.ManagedByValue &&
		job.Spec.Suspend != nil && *job.Spec.Suspend && Queue(job) == ""
}

// WithSubmit refines the result of a Job its submit has not finished (see SubmitUnfinished);
// any other result is returned unchanged. now is the caller's clock, against which the Job's
// creationTimestamp gives its age: younger than SubmitGrace it is still being submitted and
// stays a plain Pending, older it is IncompleteSubmit. A client clock behind the server's only
// delays the verdict; one far ahead could call a running submit incomplete, which the message
// allows for.
func WithSubmit(r Result, job *batchv1.Job, now time.Time) Result {
	if r.Status != Pending || r.Reason != "" || !SubmitUnfinished(job) {
		return r
	}
	age := now.Sub(job.CreationTimestamp.Time)
	if age < SubmitGrace {
		r.Message = "being submitted: kubectl-tao starts it once its Service, Secrets and ConfigMaps exist"
		return r
	}
	r.Reason = IncompleteSubmit
	r.Message = fmt.Sprintf("its submit never finished (created suspended %s ago and never started: the submit was "+
		"interrupted, or removing what it made failed); nothing will start it: remove it with `%s` and submit again",
		age.Round(time.Second), RemoveCommand(job))
	return r
}

// RemoveCommand is the command that removes an incomplete submit's Job with whatever children
// it has: `kubectl tao delete`, which accepts it although it never finished.
func RemoveCommand(job *batchv1.Job) string {
	return fmt.Sprintf("kubectl tao delete %s -n %s", job.Name, job.Namespace)
}
