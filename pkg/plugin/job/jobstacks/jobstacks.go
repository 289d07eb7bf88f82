// Package jobstacks reads every rank's Python stacks from a running job, without stopping it:
// one pods/exec per rank of `kubectl-tao stage stacks` in the rank's container, where the
// supervisor runs the command (package supervisor says how the stacks are taken).
package jobstacks

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"golang.org/x/sync/errgroup"
)

// parallel bounds the execs in flight: each is a stream through the API server.
const parallel = 8

// Executor runs a command in a pod's container and returns its stdout (jobtop.RemoteExecutor).
type Executor interface {
	Exec(ctx context.Context, namespace, pod, container string, command []string) ([]byte, error)
}

// Rank is one rank's stacks, or why there are none.
type Rank struct {
	Rank   int    `json:"rank"`
	Pod    string `json:"pod,omitempty"`
	Node   string `json:"node,omitempty"`
	Stacks string `json:"stacks,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Command is what runs in the rank's container.
var Command = []string{s3layout.StagerBinary, "stage", "stacks"}

// Collect reads the stacks of rank (every rank when rank < 0) of job. A job the supervisor does
// not run is an error saying so; a single rank that is not running is Resolve's error (as logs
// has it for a gone pod); with every rank asked for, such a rank carries its reason instead.
func Collect(ctx context.Context, client kubernetes.Interface, ex Executor, namespace, job string, rank int) ([]Rank, error) {
	j, pods, err := jobpods.Fetch(ctx, client, namespace, job)
	if err != nil {
		return nil, err
	}
	if !jobspec.Supervised(&j.Spec.Template.Spec) {
		return nil, exitcode.WithCode(exitcode.Usage, fmt.Errorf("job.batch/%s does not run under kubectl-tao's supervisor (it was submitted without --input, --output-path, "+
			"--checkpoint-dir or --hang-timeout), which takes the stacks: with py-spy in the image, "+
			"kubectl tao exec %s --rank N -- py-spy dump --pid PID reads one process's", job, job))
	}
	ranks := []int{rank}
	if rank < 0 {
		ranks = ranks[:0]
		for r := range jobpods.Ranks(j) {
			ranks = append(ranks, r)
		}
	}
	out := make([]Rank, len(ranks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, r := range ranks {
		out[i].Rank = r
		pod, err := jobpods.Resolve(job, jobpods.Ranks(j), pods, r)
		if err != nil {
			if rank >= 0 {
				return nil, err
			}
			out[i].Error = err.Error()
			continue
		}
		out[i].Pod, out[i].Node = pod.Name, pod.Spec.NodeName
		g.Go(func() error {
			b, err := ex.Exec(gctx, namespace, pod.Name, jobspec.ContainerName, Command)
			out[i].Stacks = string(b)
			if err != nil {
				out[i].Error = strings.TrimPrefix(err.Error(), "command terminated with non-zero exit code: ")
			}
			return nil
		})
	}
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
