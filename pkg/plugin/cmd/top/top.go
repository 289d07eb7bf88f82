// Package top implements `kubectl tao top`: whether a running job's training is healthy (each
// rank's GPU use and memory, when it last printed, the training's progress) and what looks
// wrong, once or redrawn with -w.
package top

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwatch"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

const example = `  # Each rank's GPU use, memory and last output; -w redraws with a sparkline per rank
  kubectl tao top train-1
  kubectl tao top train-1 -w

  # Every running job of the namespace (-A: of all), or the JSON document for scripts
  kubectl tao top
  kubectl tao top train-1 -o json`

const long = `Show whether a running job's training is healthy: each rank's GPU use and memory, when it
last printed and its attempt; the job's progress, ETA and KPIs (TAO's status.json) above; the
findings below (a silent rank, a likely hang, idle GPUs, memory nearly full, progress stalled,
a hardware Xid). GPU numbers come from dcgm-exporter through the API server's pod proxy, one
request per node, else from nvidia-smi in the rank; no Prometheus is needed. Without JOB: one
row per running job of the namespace (-A: of all).

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/top.md`

// Options are the flags and arguments of `kubectl tao top`.
type Options struct {
	namespace, name string
	AllNamespaces   bool
	Watch           bool
	Interval        time.Duration
	SilentAfter     time.Duration
	out             *printer.Flags

	factory cmdutil.Factory
	clock   clock.PassiveClock
	genericiooptions.IOStreams

	reader  *jobtop.Reader
	history history
	told    map[string]bool
}

// NewCmd builds `kubectl tao top`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithTable()), factory: f, clock: clk, IOStreams: streams,
		Interval: 5 * time.Second, SilentAfter: jobtop.DefaultSilentAfter, told: map[string]bool{}}
	cmd := &cobra.Command{
		Use:                   "top [JOB] [-w] [-o FORMAT]",
		DisableFlagsInUseLine: true,
		Short:                 "Show the GPU use, progress and health of running jobs",
		Long:                  long,
		Example:               example,
		Args:                  cobra.MaximumNArgs(1),
		RunE:                  cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Without JOB: the running jobs of every namespace.")
	fl.BoolVarP(&o.Watch, "watch", "w", false, "Redraw every --interval until interrupted, with each rank's recent GPU use as a sparkline.")
	fl.DurationVar(&o.Interval, "interval", o.Interval, "How often -w reads again.")
	fl.DurationVar(&o.SilentAfter, "silent-after", o.SilentAfter, "How long a rank that printed may stay quiet before it is a finding.")
	o.out.AddFlags(fl, "a table")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the namespace and the Job reference, when given.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	if len(args) == 1 {
		o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
		return err
	}
	o.namespace, err = o.factory.Namespace()
	return err
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	switch {
	case o.name != "" && o.AllNamespaces:
		return exitcode.Usagef("-A lists the jobs of every namespace: give no JOB with it")
	case o.Interval < time.Second:
		return exitcode.Usagef("--interval must be 1s or more, got %s", o.Interval)
	case o.SilentAfter <= 0:
		return exitcode.Usagef("--silent-after must be more than 0, got %s", o.SilentAfter)
	}
	return o.out.Validate()
}

// Run reads once, or every --interval with -w until interrupted. With -w, an API server that
// stops answering is said in one line when it goes and one when it is back, as logs -f and
// wait say it, and the readings go on after it.
func (o *Options) Run(ctx context.Context) error {
	// One log read per rank at once, as logs --tail 1 makes them.
	cmdutil.RaiseRateLimit(o.factory, tail.DefaultMaxLogRequests)
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	if o.reader, err = cmdutil.TrainingReader(o.factory, o.SilentAfter, o.Watch); err != nil {
		return err
	}
	what := "watching the running jobs"
	if o.name != "" {
		what = "watching job.batch/" + o.name
	}
	reach := outage.New(o.ErrOut, what, o.clock)
	for {
		jobs, err := o.read(ctx, client)
		if err == nil && o.Watch {
			// A reading cut short by an outage is partial: the next one replaces it.
			err = unreachable(jobs)
		}
		switch {
		case err != nil && o.Watch && ctx.Err() != nil:
			return nil
		case err != nil && o.Watch && reach.Failed(err):
		case err != nil:
			return err
		default:
			reach.OK()
			if err := o.print(jobs); err != nil {
				return err
			}
		}
		if !o.Watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.after(o.Interval):
		}
	}
}

// unreachable is the error of the first job whose reading the API server's outage cut short.
func unreachable(jobs []jobtop.Job) error {
	for _, j := range jobs {
		if j.Unreachable != nil {
			return j.Unreachable
		}
	}
	return nil
}

// after waits on the command's clock where it can (a fake one in tests), else on real time.
func (o *Options) after(d time.Duration) <-chan time.Time {
	if c, ok := o.clock.(clock.Clock); ok {
		return c.After(d)
	}
	return time.After(d)
}

// read takes one reading: of the job, or of every running job of the namespace(s).
func (o *Options) read(ctx context.Context, client kubernetes.Interface) ([]jobtop.Job, error) {
	now := o.clock.Now()
	if o.name != "" {
		job, pods, err := jobpods.Fetch(ctx, client, o.namespace, o.name)
		switch {
		case apierrors.IsNotFound(err) && job == nil:
			return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s not found in namespace %s", o.name, o.namespace))
		case err != nil && job == nil:
			return nil, fmt.Errorf("reading job.batch/%s: %w", o.name, err)
		case err != nil:
			return nil, fmt.Errorf("listing the pods of job.batch/%s: %w", o.name, err)
		}
		return o.reader.Read(ctx, []jobtop.Target{{Job: job, Pods: pods}}, now), nil
	}
	ns := o.namespace
	if o.AllNamespaces {
		ns = ""
	}
	selector := jobspec.ManagedByLabel + "=" + jobspec.ManagedByValue
	jobs, _, err := jobwatch.ListJobs(ctx, client, ns, selector)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	var running []*batchv1.Job
	for i := range jobs {
		if jobs[i].Status.Active > 0 && jobs[i].DeletionTimestamp == nil {
			running = append(running, &jobs[i])
		}
	}
	if len(running) == 0 {
		return nil, nil
	}
	// One list for the pods of every running job: the Job controller labels each with its
	// Job's name.
	names := map[string]bool{}
	for _, j := range running {
		names[j.Name] = true
	}
	podSelector := labels.NewSelector()
	req, err := labels.NewRequirement(jobspec.JobNameLabel, selection.In, sets.List(sets.KeySet(names)))
	if err != nil {
		return nil, err
	}
	pods, _, err := jobpods.ListSelected(ctx, client, ns, podSelector.Add(*req).String())
	if err != nil {
		return nil, fmt.Errorf("listing the jobs' pods: %w", err)
	}
	var targets []jobtop.Target
	for _, j := range running {
		t := jobtop.Target{Job: j, Pods: jobpods.Keep(append([]corev1.Pod(nil), pods...), j.UID)}
		targets = append(targets, t)
	}
	sort.Slice(targets, func(a, b int) bool {
		if targets[a].Job.Namespace != targets[b].Job.Namespace {
			return targets[a].Job.Namespace < targets[b].Job.Namespace
		}
		return targets[a].Job.Name < targets[b].Job.Name
	})
	var out []jobtop.Job
	for _, j := range o.reader.Read(ctx, targets, now) {
		if j.Status == string(jobstatus.Running) {
			out = append(out, j)
		}
	}
	return out, nil
}

// print writes one reading: the notes once each to stderr, then the output.
func (o *Options) print(jobs []jobtop.Job) error {
	// A round per reading, not per job: -w without JOB reads several jobs at once.
	o.history.rounds++
	for _, j := range jobs {
		for _, n := range j.Notes {
			if !o.told[n] {
				o.told[n] = true
				fmt.Fprintf(o.ErrOut, "Warning: %s\n", n)
			}
		}
		o.history.add(j)
	}
	if !o.out.Human() {
		if o.name != "" {
			return o.out.Print(o.Out, jobs[0])
		}
		if jobs == nil {
			jobs = []jobtop.Job{}
		}
		return o.out.Print(o.Out, struct {
			Jobs []jobtop.Job `json:"jobs"`
		}{jobs})
	}
	if o.Watch && cmdutil.IsTerminal(o.Out) {
		// Redraw in place, as watch(1) does.
		fmt.Fprint(o.Out, "\x1b[H\x1b[2J")
	} else if o.Watch && o.history.rounds > 1 {
		fmt.Fprintln(o.Out)
	}
	now := o.clock.Now()
	if o.name != "" {
		return o.printJob(o.Out, jobs[0], now)
	}
	if len(jobs) == 0 {
		where := "namespace " + o.namespace
		if o.AllNamespaces {
			where = "any namespace"
		}
		fmt.Fprintf(o.ErrOut, "No running jobs in %s.\n", where)
		return nil
	}
	return o.out.PrintTable(o.Out, o.jobsTable(jobs))
}

// printJob is the human view of one job: its line, a row per rank, the findings.
func (o *Options) printJob(w io.Writer, j jobtop.Job, now time.Time) error {
	fmt.Fprintln(w, jobLine(j))
	if err := o.out.PrintTable(w, o.ranksTable(j, now)); err != nil {
		return err
	}
	if len(j.Findings) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Findings:")
		for _, f := range j.Findings {
			fmt.Fprintf(w, "  %s: %s\n    -> %s\n", f.NodeEventName, f.Message, f.Suggestion)
		}
	}
	return nil
}

// jobLine is the line above the ranks: status, progress, ETA, KPIs, where GPU numbers came from.
func jobLine(j jobtop.Job) string {
	parts := []string{fmt.Sprintf("job.batch/%s", j.Job), j.Status}
	if j.NodesRange != nil {
		parts = append(parts, fmt.Sprintf("%s (elastic %s)", plural.N(j.Nodes, "rank"), *j.NodesRange))
	}
	if p := j.Progress; p != nil {
		parts = append(parts, p.String())
		if eta := p.ETAString(); eta != "" {
			parts = append(parts, "ETA "+eta)
		}
		if len(p.KPI) > 0 {
			keys := make([]string, 0, len(p.KPI))
			for k := range p.KPI {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var kv []string
			for _, k := range keys {
				kv = append(kv, fmt.Sprintf("%s=%.4g", k, p.KPI[k]))
			}
			parts = append(parts, strings.Join(kv, " "))
		}
	}
	parts = append(parts, "GPU metrics: "+j.MetricsSource)
	if g := gpusNote(j); g != "" {
		parts = append(parts, g)
	}
	return strings.Join(parts, "  ")
}

// gpusNote says what the job's GPUs are when they are not whole GPUs of its own, since that
// changes what the GPU columns mean; "" for whole GPUs.
func gpusNote(j jobtop.Job) string {
	resource := corev1.ResourceName(j.GPUResource)
	var what string
	switch {
	case j.SharedGPU:
		what = "shared with other pods: GPU and GPU MEM are the whole GPU's, not the job's"
	case jobspec.IsMIGResource(resource):
		what = "MIG slices: GPU is each slice's engine activity, GPU MEM its own memory"
	default:
		return ""
	}
	if resource == jobspec.GPUResource {
		return "GPUs " + what
	}
	return fmt.Sprintf("GPUs: %s, %s", resource, what)
}
