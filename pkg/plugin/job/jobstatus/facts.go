package jobstatus

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// QueueLabel names the Kueue LocalQueue of a Job (jobspec owns the original).
const QueueLabel = "kueue.x-k8s.io/queue-name"

// Queue is the Kueue LocalQueue the Job was submitted to, "" when none.
func Queue(job *batchv1.Job) string { return job.Labels[QueueLabel] }

// Nodes is the number of ranks the Job wants: spec.completions, else parallelism, else 1.
func Nodes(job *batchv1.Job) int32 { return wanted(job) }

// Gang words the ranks Kueue starts together when it admits a job of n ranks: "all 2 ranks
// together", or "its one rank" (a one-rank job has no gang, and "all 1 ranks" reads as a bug).
func Gang[T plural.Count](n T) string {
	if n == 1 {
		return "its one rank"
	}
	return fmt.Sprintf("all %d ranks together", n)
}

// GPUsPerNode is the limit, in the Job's GPU resource (jobspec.GPUResourceOf: whole GPUs, MIG
// slices or shared GPUs), of its first container (the training container), or its request
// when no limit is set; 0 when neither is.
func GPUsPerNode(job *batchv1.Job) int64 {
	cs := job.Spec.Template.Spec.Containers
	if len(cs) == 0 {
		return 0
	}
	gpu := jobspec.GPUResourceOf(job)
	if q, ok := cs[0].Resources.Limits[gpu]; ok {
		return q.Value()
	}
	if q, ok := cs[0].Resources.Requests[gpu]; ok {
		return q.Value()
	}
	return 0
}

// GPUShape renders the Job's GPU request the way list shows it: GPUs per node x nodes ("8x2"),
// or "0" for a Job without GPUs.
func GPUShape(job *batchv1.Job) string {
	g := GPUsPerNode(job)
	if g == 0 {
		return "0"
	}
	return fmt.Sprintf("%dx%d", g, Nodes(job))
}
