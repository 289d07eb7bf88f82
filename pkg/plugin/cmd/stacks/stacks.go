// Package stacks implements `kubectl tao stacks`: every rank's Python stacks, read while the job
// trains (package jobstacks).
package stacks

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstacks"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Where every rank of a job is, right now: all threads of every Python process
  kubectl tao stacks ddp

  # One rank
  kubectl tao stacks ddp --rank 3`

const long = `Print the Python stacks of every rank of a running job (all threads of every Python process
of the command, torchrun's workers included), each line prefixed by its rank as logs does, without
stopping the training. The supervisor that runs the command in each pod takes them: with py-spy
where the image has it, else with Python's own faulthandler, which it registers for every Python
process of the command at its start (a real-time signal no framework uses; a sitecustomize of the
image or the user's still runs). A job submitted without --input, --output-path,
--checkpoint-dir or --hang-timeout has no supervisor, and no stacks to give.

A rank whose pod is not running (finished, replaced, not yet started) is said on stderr; with
--rank, it fails the command as logs does (exit 3 when it has no pod, 1 when not running).

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/hangs.md`

// Options are the flags and arguments of `kubectl tao stacks`.
type Options struct {
	Rank int

	namespace, job string
	rankSet        bool
	factory        cmdutil.Factory
	// executor runs stage stacks in a rank's container; pods/exec through the API server when nil.
	executor jobstacks.Executor
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao stacks`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return (&Options{factory: f, IOStreams: streams, Rank: -1}).cobraCommand(f)
}

func (o *Options) cobraCommand(f cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "stacks JOB [--rank N]",
		DisableFlagsInUseLine: true,
		Short:                 "Print every rank's Python stacks without stopping the job",
		Long:                  long,
		Example:               example,
		Args:                  cmdutil.ExactlyOneJob,
		RunE:                  cmdutil.RunE(o),
	}
	cmd.Flags().IntVar(&o.Rank, "rank", o.Rank, "Only this rank (completion index); default: every rank.")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the namespace.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	o.rankSet = cmd.Flags().Changed("rank")
	var err error
	o.namespace, o.job, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	if o.rankSet {
		return cmdutil.ValidateRank(o.Rank)
	}
	return nil
}

// Run reads the stacks and prints them.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	ex := o.executor
	if ex == nil {
		cfg, err := cmdutil.CoreRESTConfig(o.factory)
		if err != nil {
			return err
		}
		ex = jobtop.RemoteExecutor{Client: client, Config: cfg}
	}
	ranks, err := jobstacks.Collect(ctx, client, ex, o.namespace, o.job, o.Rank)
	if err != nil {
		return err
	}
	read := 0
	for _, r := range ranks {
		if r.Error != "" {
			fmt.Fprintf(o.ErrOut, "rank %d: %s\n", r.Rank, r.Error)
		}
		if r.Stacks != "" {
			read++
		}
	}
	w := bufio.NewWriter(o.Out)
	for _, r := range ranks {
		prefix := fmt.Sprintf("[rank %d] ", r.Rank)
		for _, l := range strings.SplitAfter(r.Stacks, "\n") {
			if l != "" {
				_, _ = w.WriteString(prefix + strings.TrimSuffix(l, "\n") + "\n")
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if read == 0 {
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("no rank of job.batch/%s gave its stacks", o.job))
	}
	return nil
}
