package tail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// FollowSubmitted is `submit --follow`: it follows every rank of the job just created, as
// `logs -f` does, with default flags. Ctrl-C detaches and leaves the job running, and says how
// to cancel it.
func FollowSubmitted(ctx context.Context, client kubernetes.Interface, namespace, job string, stuckTimeout time.Duration, streams genericiooptions.IOStreams) error {
	e := &Engine{Client: client, Out: streams.Out, ErrOut: streams.ErrOut}
	res, err := e.Follow(ctx, Config{Namespace: namespace, Job: job, Prefix: PrefixRank, MaxLogRequests: DefaultMaxLogRequests, StuckTimeout: stuckTimeout})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return exitcode.WithCode(exitcode.Error, fmt.Errorf("detached from job.batch/%s: it keeps running; cancel it with: kubectl tao cancel %s -n %s", job, job, namespace))
		}
		return err
	}
	return jobwait.Err(job, res)
}
