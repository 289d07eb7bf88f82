package submit

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// follow is --follow: it follows every rank of the job just created, as `logs -f` does, with
// default flags, and exits with the outcome's code. Ctrl-C detaches and leaves the job
// running, and says how to cancel it.
func (o *Options) follow(ctx context.Context, client kubernetes.Interface, namespace, job string, streams genericiooptions.IOStreams) error {
	e := &tail.Engine{Client: client, Out: streams.Out, ErrOut: streams.ErrOut}
	cfg := tail.Config{Namespace: namespace, Job: job, Prefix: tail.PrefixRank, MaxLogRequests: tail.DefaultMaxLogRequests, StuckTimeout: o.StuckTimeout}
	res, err := e.Follow(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return exitcode.WithCode(exitcode.Error, fmt.Errorf("detached from job.batch/%s: it keeps running; cancel it with: kubectl tao cancel %s -n %s", job, job, namespace))
		}
		return err
	}
	return jobwait.Err(job, res)
}
