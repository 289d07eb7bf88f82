// Package logs implements `kubectl tao logs`: the cobra glue over the tail engine.
package logs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobref"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Every rank's log, in rank order, each line prefixed with its rank
  kubectl tao logs train-1

  # The last 20 lines of ranks 0 and 3, with timestamps
  kubectl tao logs train-1 --rank 0 --rank 3 --tail 20 --timestamps

  # Follow every rank until the job ends; the exit code is the job's (as with wait)
  kubectl tao logs -f train-1 && echo "training succeeded"

  # One file per rank, from the pods or, once they are gone, from the archive in S3
  kubectl tao logs train-1 --save ./train-1-logs`

const long = `Print the logs of every pod (rank) of a job, in rank order, each line prefixed with its rank.

With -f every rank is followed until the job ends, and the exit code is the job's outcome, as
with 'kubectl tao wait'. Once the pods are gone, the logs of a job submitted with --output-path
are read from their archive in S3.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/watching.md#logs-of-every-rank`

// Options are the flags and arguments of `kubectl tao logs`.
type Options struct {
	Job            string
	Follow         bool
	Tail           int64
	Since          time.Duration
	Timestamps     bool
	Ranks          []int
	Previous       bool
	Container      string
	Prefix         string
	NoPrefix       bool
	MaxLogRequests int
	FromArchive    bool
	Attempt        int
	Save           string
	UID            string
	S3Secret       string
	StuckTimeout   time.Duration

	prefixSet bool
	// attemptSet is --attempt given: an explicit 0 names no attempt (they count from 1).
	attemptSet bool
	// save, with --save, takes each attempt's lines instead of stdout.
	save    *tail.SaveFiles
	getenv  func(string) string
	cfg     tail.Config
	factory cmdutil.Factory
	genericiooptions.IOStreams
}

// NewOptions returns options with the defaults of the flags. getenv (os.Getenv outside tests)
// gives the S3 credentials of the log archive.
func NewOptions(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *Options {
	return &Options{
		Tail:           -1,
		Prefix:         string(tail.PrefixRank),
		MaxLogRequests: tail.DefaultMaxLogRequests,
		factory:        f,
		getenv:         getenv,
		IOStreams:      streams,
	}
}

// NewCmd builds `kubectl tao logs`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := NewOptions(f, streams, getenv)
	cmd := &cobra.Command{
		Use:                   "logs JOB [-f] [--rank N]... [--tail N] [--since DURATION]",
		DisableFlagsInUseLine: true,
		Short:                 "Print or follow the logs of every rank of a job",
		Long:                  long,
		Example:               example,
		Args:                  cmdutil.ExactlyOneJob,
		RunE:                  cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.BoolVarP(&o.Follow, "follow", "f", o.Follow, "Follow every rank until the job ends; exit with the job's outcome (0 Complete, 9 Error, 10 Canceled).")
	fl.Int64Var(&o.Tail, "tail", o.Tail, "Lines of recent log to show per pod; -1 shows all.")
	fl.DurationVar(&o.Since, "since", o.Since, "Only lines newer than this, e.g. 5s, 2m, 3h.")
	fl.BoolVar(&o.Timestamps, "timestamps", o.Timestamps, "Show each line's RFC3339 timestamp.")
	fl.IntSliceVar(&o.Ranks, "rank", o.Ranks, "Only this rank (repeatable, or comma-separated).")
	fl.BoolVarP(&o.Previous, "previous", "p", o.Previous, "The previous, terminated instance of each container.")
	fl.StringVarP(&o.Container, "container", "c", o.Container, "Container to read; default: each pod's default container.")
	fl.StringVar(&o.Prefix, "prefix", o.Prefix, "Prefix of each line: rank (\"[rank 0] \") or pod (\"[pod/NAME] \").")
	fl.Lookup("prefix").NoOptDefVal = string(tail.PrefixPod)
	fl.BoolVar(&o.NoPrefix, "no-prefix", o.NoPrefix, "Print lines without a prefix.")
	fl.IntVar(&o.MaxLogRequests, "max-log-requests", o.MaxLogRequests, "Most log streams open at once; following more pods than this is refused.")
	fl.BoolVar(&o.FromArchive, "from-archive", o.FromArchive, "Read the ranks' logs archived in S3 even while the pods exist.")
	fl.IntVar(&o.Attempt, "attempt", o.Attempt, "Only this attempt of each rank (1 is the first), read from the archive.")
	fl.StringVar(&o.Save, "save", o.Save, "Write each rank's lines, without prefix, to a file DIR/rank-<N>.log instead of stdout (one per attempt for a retried rank).")
	fl.StringVar(&o.UID, "uid", o.UID, "The run whose archived logs to read, when the Job is gone and its name has several runs (see 'kubectl tao results --all-runs').")
	fl.StringVar(&o.S3Secret, "s3-secret", o.S3Secret, "Secret with the S3 credentials of the log archive, when the shell has none and the Job (with its own Secret) is gone.")
	jobwait.AddStuckTimeoutFlag(fl, &o.StuckTimeout)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job and the namespace. It does not contact the server.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	name, err := jobref.Parse(args[0])
	if err != nil {
		return err
	}
	o.Job = name
	o.prefixSet = cmd.Flags().Changed("prefix")
	o.attemptSet = cmd.Flags().Changed("attempt")
	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	o.cfg = tail.Config{
		Namespace:      ns,
		Job:            o.Job,
		Container:      o.Container,
		Ranks:          o.Ranks,
		Prefix:         tail.Prefix(o.Prefix),
		Timestamps:     o.Timestamps,
		Since:          o.Since,
		Previous:       o.Previous,
		MaxLogRequests: o.MaxLogRequests,
		StuckTimeout:   o.StuckTimeout,
	}
	if o.NoPrefix {
		o.cfg.Prefix = tail.PrefixNone
	}
	if o.Save != "" {
		// The files hold the lines alone: their names say the rank and the attempt.
		o.cfg.Prefix = tail.PrefixNone
	}
	if o.Tail >= 0 {
		o.cfg.TailLines = &o.Tail
	}
	return nil
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	switch {
	case o.Prefix != string(tail.PrefixRank) && o.Prefix != string(tail.PrefixPod):
		return exitcode.Usagef("--prefix must be rank or pod, got %q", o.Prefix)
	case o.NoPrefix && o.prefixSet:
		return exitcode.Usagef("--prefix and --no-prefix cannot be used together")
	case o.Tail < -1:
		return exitcode.Usagef("--tail must be -1 (all) or at least 0, got %d", o.Tail)
	case o.Since < 0:
		return exitcode.Usagef("--since must be positive, got %s", o.Since)
	case o.StuckTimeout < 0:
		return jobwait.ValidateStuckTimeout(o.StuckTimeout)
	case o.MaxLogRequests < 1:
		return exitcode.Usagef("--max-log-requests must be at least 1, got %d", o.MaxLogRequests)
	}
	for _, r := range o.Ranks {
		if r < 0 {
			return exitcode.Usagef("--rank must be 0 or more, got %d", r)
		}
	}
	if o.Save != "" {
		if err := tail.CheckSaveDir(o.Save); err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
	}
	if o.Attempt < 0 || o.attemptSet && o.Attempt == 0 {
		return exitcode.Usagef("--attempt must be 1 or more, got %d", o.Attempt)
	}
	if o.fromArchive() {
		// The archive is whole files of plain lines: nothing to follow, no stamps, no containers.
		switch {
		case o.Follow:
			return exitcode.Usagef("--from-archive, --attempt and --uid read the archived logs of a run: they cannot be followed (-f)")
		case o.Timestamps, o.Since != 0, o.Previous, o.Container != "":
			return exitcode.Usagef("--from-archive, --attempt and --uid take --rank, --tail, --prefix, --no-prefix: archived lines have no timestamps or containers")
		}
	}
	return jobresults.ValidateUID(o.Job, o.UID)
}

// Run reads or follows the logs, to stdout or, with --save, into one file per rank.
func (o *Options) Run(ctx context.Context) error {
	if o.Save == "" {
		return o.run(ctx)
	}
	save, err := tail.CreateSaveFiles(o.Save, o.Attempt, o.Follow)
	if err != nil {
		return err
	}
	o.save = save
	err = o.run(ctx)
	summary, serr := save.Close(err)
	if summary != "" {
		fmt.Fprintln(o.ErrOut, summary)
	}
	if serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

func (o *Options) run(ctx context.Context) error {
	// Sized before the client exists: client-go's rate limiter must not queue the fan-out.
	cmdutil.RaiseRateLimit(o.factory, o.MaxLogRequests)
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	e := &tail.Engine{Client: client, Out: o.Out, ErrOut: o.ErrOut}
	if o.save != nil {
		e.Split = o.save.For
	}
	if o.fromArchive() {
		job, err := jobdelete.GetJob(ctx, client, o.cfg.Namespace, o.Job)
		if err != nil && exitcode.Of(err) != exitcode.NotFound {
			return err
		}
		_, err = o.archive(ctx, e, client, job, true)
		return err
	}
	if !o.Follow {
		e.Gone = func(ctx context.Context, job *batchv1.Job) (bool, error) {
			return o.archive(ctx, e, client, job, false)
		}
		return e.Logs(ctx, o.cfg)
	}
	res, err := e.Follow(ctx, o.cfg)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return exitcode.WithCode(exitcode.Error, fmt.Errorf("interrupted: stopped following job.batch/%s (the job keeps running)", o.Job))
		}
		return err
	}
	return jobwait.Err(o.Job, res)
}

// fromArchive says the flags ask for the archive whether or not the pods exist: attempts are
// numbered by the archive (--attempt), and a run is named by its UID (--uid).
func (o *Options) fromArchive() bool { return o.FromArchive || o.Attempt > 0 || o.UID != "" }

// archive prints the run's archived logs through e (to stdout or --save's files). Unless asked
// for (--from-archive, --uid), a Job without S3 credentials or without an archive falls back to
// what logs reports without one (false): not every job is staged. A --s3-secret that cannot be
// read is an error either way.
func (o *Options) archive(ctx context.Context, e *tail.Engine, client kubernetes.Interface, job *batchv1.Job, asked bool) (bool, error) {
	if job != nil && !asked {
		if _, staged := job.Annotations[s3layout.AnnotationOutputs]; !staged {
			return false, nil
		}
	}
	run, err := jobresults.FindRun(ctx, client, jobresults.Lookup{Namespace: o.cfg.Namespace, Name: o.Job, Job: job, UID: o.UID,
		Source: jobresults.Source{Getenv: o.getenv, Secret: o.S3Secret}})
	if err != nil {
		var noStore *jobresults.ConnectError
		switch {
		case asked:
		case errors.As(err, &noStore):
			// Without credentials there is no archive to try; but a Secret the user named that
			// cannot be read is an error to show, not a reason to fall back to "not found".
			if o.S3Secret == "" {
				return false, nil
			}
		case exitcode.Of(err) == exitcode.NotFound:
			return false, nil
		}
		return false, err
	}
	logs, err := run.ReadLogs(ctx, o.Ranks, o.Attempt)
	if err != nil {
		if !asked && exitcode.Of(err) == exitcode.NotFound && len(o.Ranks) == 0 {
			return false, nil
		}
		return false, err
	}
	why := "its pods are gone"
	switch {
	case job == nil:
		why = "the Job is gone"
	case asked:
		why = "as asked"
	}
	fmt.Fprintf(o.ErrOut, "Reading the archived logs of job.batch/%s (uid %s) from %s: %s.\n", o.Job, run.UID, run.LogArchiveURL(), why)
	return true, e.WriteArchived(logs, o.cfg.Prefix, o.cfg.TailLines)
}
