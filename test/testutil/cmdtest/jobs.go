package cmdtest

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// IncompleteSubmit is a Job, in namespace default, that a submit created at created and never
// started: marked as being submitted, suspended (jobstatus.IncompleteSubmit once past its grace).
func IncompleteSubmit(name string, created time.Time) *batchv1.Job {
	return fixture.Job(name).Namespace("default").Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).
		Annotation(jobspec.SubmittingAnnotation, "true").Suspend(true).Created(created).Obj()
}
