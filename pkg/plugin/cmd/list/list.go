// Package list implements `kubectl tao list` (alias `get`): the plugin's Jobs as kubectl prints
// them, with kubectl get's printing flags (-o wide|json|yaml|name|custom-columns|jsonpath|...).
package list

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/cmd/get"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwatch"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// managedBy selects the Jobs kubectl-tao made (jobspec puts this label on each).
const managedBy = "app.kubernetes.io/managed-by=kubectl-tao"

const example = `  # The training jobs of the current namespace, and of every namespace
  kubectl tao list
  kubectl tao list -A

  # With image and command; only some jobs; follow changes
  kubectl tao list -o wide -l team=vision
  kubectl tao list --watch

  # Anything kubectl get prints
  kubectl tao list -o custom-columns=NAME:.metadata.name,GPUS:.spec.template.spec.containers[0].resources.limits.nvidia\.com/gpu
  kubectl tao list -o json`

// Options are the flags of `kubectl tao list`.
type Options struct {
	PrintFlags    *get.PrintFlags
	AllNamespaces bool
	Selector      string
	Watch         bool

	namespace string
	selector  string
	printer   printers.ResourcePrinter
	human     bool

	factory cmdutil.Factory
	clock   clock.PassiveClock
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao list`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	pf := get.NewGetPrintFlags()
	// The table printer does not sort; --sort-by would be accepted and ignored.
	pf.HumanReadableFlags.SortBy = nil
	o := &Options{PrintFlags: pf, factory: f, clock: clk, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "list [-A] [-l SELECTOR] [-o FORMAT] [--watch]",
		DisableFlagsInUseLine: true,
		Aliases:               []string{"get"},
		Short:                 "List training jobs",
		Long: "List the Jobs kubectl-tao submitted (label " + managedBy + ") with their status,\n" +
			"GPUs (per node x nodes), ranks running and age. The status comes from each Job's own\n" +
			"conditions and counters.",
		Example: example,
		Args:    cobra.NoArgs,
		RunE:    cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "List the jobs of every namespace.")
	fl.StringVarP(&o.Selector, "selector", "l", "", "Label selector to filter on (ANDed with the managed-by label), e.g. -l team=vision,stage!=dev.")
	fl.BoolVarP(&o.Watch, "watch", "w", false, "After listing, print each change until interrupted.")
	pf.AddFlags(cmd)
	return cmd
}

// Complete resolves the namespace.
func (o *Options) Complete(_ *cobra.Command, _ []string) error {
	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	o.namespace = ns
	if o.AllNamespaces {
		o.namespace = metav1.NamespaceAll
		if err := o.PrintFlags.EnsureWithNamespace(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the selector and the output format.
func (o *Options) Validate() error {
	o.selector = managedBy
	if o.Selector != "" {
		sel, err := labels.Parse(o.Selector)
		if err != nil {
			return exitcode.Usagef("invalid --selector %q: %w", o.Selector, err)
		}
		o.selector += "," + sel.String()
	}
	format := *o.PrintFlags.OutputFormat
	o.human = format == "" || format == "wide"
	p, err := o.PrintFlags.ToPrinter()
	if err != nil {
		// kubectl's text as is: every command says the same about an unknown -o.
		return exitcode.WithCode(exitcode.Usage, err)
	}
	o.printer = p
	return nil
}

// Run lists the Jobs and prints them, then follows changes with --watch.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	jobs, rv, err := List(ctx, client, o.namespace, o.selector)
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	if len(jobs) == 0 && o.human {
		o.noneFound()
	}
	if err := o.printAll(ctx, client, jobs); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	return o.watch(ctx, client, rv, jobs)
}

func (o *Options) noneFound() {
	if o.namespace == metav1.NamespaceAll {
		fmt.Fprintln(o.ErrOut, "No resources found")
		return
	}
	fmt.Fprintf(o.ErrOut, "No resources found in %s namespace.\n", o.namespace)
}

// workloads reads Kueue's Workloads (one list) when a job waits in a Kueue queue, so the table
// says why, and their positions (one read per LocalQueue, where Kueue's visibility API is
// served); a failure only costs that detail.
func (o *Options) workloads(ctx context.Context, client kubernetes.Interface, jobs []batchv1.Job) map[types.UID]*jobstatus.Workload {
	if !slices.ContainsFunc(jobs, func(j batchv1.Job) bool { return kueue.Waiting(&j) }) {
		return nil
	}
	dyn, err := o.factory.DynamicClient()
	if err == nil {
		var wls map[types.UID]*jobstatus.Workload
		if wls, err = kueue.WorkloadsIn(ctx, client.Discovery(), dyn, o.namespace); err == nil {
			// Positions are a detail of their own: failing to read them keeps the rest.
			if err := kueue.AddPositions(ctx, client.Discovery(), dyn, jobs, wls); err != nil {
				fmt.Fprintf(o.ErrOut, "Warning: could not read the queued jobs' positions: %v\n", err)
			}
			return wls
		}
	}
	fmt.Fprintf(o.ErrOut, "Warning: could not read Kueue's Workloads: %v\n", err)
	return nil
}

func (o *Options) printAll(ctx context.Context, client kubernetes.Interface, jobs []batchv1.Job) error {
	if o.human {
		if len(jobs) == 0 {
			return nil
		}
		return o.printer.PrintObj(Table(jobs, o.workloads(ctx, client, jobs), o.clock.Now()), o.Out)
	}
	if o.Watch {
		// A stream of objects, as kubectl get --watch prints: one per item, then one per change.
		for i := range jobs {
			u, err := toUnstructured(&jobs[i])
			if err != nil {
				return err
			}
			if err := o.printer.PrintObj(u, o.Out); err != nil {
				return err
			}
		}
		return nil
	}
	list, err := ToList(jobs)
	if err != nil {
		return err
	}
	return o.printer.PrintObj(list, o.Out)
}

// watch prints every change after resourceVersion rv until ctx ends, through jobwatch: a
// dropped connection is resumed from the last version seen, so it loses no change. When the
// server no longer holds the changes since that version (an API server that restarted, or etcd
// compacted), the Jobs are listed again and those that changed meanwhile are printed, as an
// informer would, and the watch goes on from the new list. An unreachable server is told in
// one stderr line when it goes and one when it is back; the retries show at -v=2. A list that
// fails otherwise, or a watch the server forbids, ends the command.
func (o *Options) watch(ctx context.Context, client kubernetes.Interface, rv string, jobs []batchv1.Job) error {
	last := map[types.UID]*batchv1.Job{}
	for i := range jobs {
		last[jobs[i].UID] = &jobs[i]
	}
	src := jobwatch.JobsSource(client, o.namespace, o.selector)
	src.Fatal = func(err error, listing bool) bool {
		if listing {
			return !outage.Is(err)
		}
		return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
	}
	retry := jobwatch.Retry{Reach: outage.New(o.ErrOut, "watching jobs", o.clock),
		Backoff: func() *wait.Backoff { return outage.Backoff(200*time.Millisecond, 5*time.Second) }}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := make(chan jobwatch.Update, 64)
	go jobwatch.Run(ctx, rv, src, retry, updates)
	for {
		var u jobwatch.Update
		select {
		case <-ctx.Done():
			return nil
		case u = <-updates:
		}
		switch {
		case u.Err != nil && u.Listing:
			return fmt.Errorf("listing jobs: %w", u.Err)
		case u.Err != nil:
			return u.Err
		case u.Resync:
			jobs := make([]batchv1.Job, 0, len(u.Objects))
			for _, obj := range u.Objects {
				if j, ok := obj.(*batchv1.Job); ok {
					jobs = append(jobs, *j)
				}
			}
			if err := o.printChanges(last, jobs); err != nil {
				return err
			}
		default:
			if job, ok := u.Event.Object.(*batchv1.Job); ok {
				if u.Event.Type == watch.Deleted {
					delete(last, job.UID)
				} else {
					last[job.UID] = job
				}
			}
			if err := o.printEvent(u.Event, o.Out); err != nil {
				return err
			}
		}
	}
}

// printChanges prints, after a new list, each Job that changed since it was last printed, and
// the last state of each Job that is gone; last becomes the list.
func (o *Options) printChanges(last map[types.UID]*batchv1.Job, jobs []batchv1.Job) error {
	now := map[types.UID]bool{}
	for i := range jobs {
		j := &jobs[i]
		now[j.UID] = true
		if prev, ok := last[j.UID]; ok && prev.ResourceVersion == j.ResourceVersion {
			continue
		}
		last[j.UID] = j
		if err := o.printEvent(watch.Event{Type: watch.Modified, Object: j}, o.Out); err != nil {
			return err
		}
	}
	var gone []*batchv1.Job
	for uid, j := range last {
		if !now[uid] {
			gone = append(gone, j)
			delete(last, uid)
		}
	}
	slices.SortFunc(gone, func(a, b *batchv1.Job) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, j := range gone {
		if err := o.printEvent(watch.Event{Type: watch.Deleted, Object: j}, o.Out); err != nil {
			return err
		}
	}
	return nil
}

func (o *Options) printEvent(ev watch.Event, out io.Writer) error {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
	case watch.Error:
		return fmt.Errorf("watching jobs: %w", apiError(ev.Object))
	default:
		return nil
	}
	job, ok := ev.Object.(*batchv1.Job)
	if !ok {
		return nil
	}
	if o.human {
		return o.printer.PrintObj(Table([]batchv1.Job{*job}, nil, o.clock.Now()), out)
	}
	u, err := toUnstructured(job)
	if err != nil {
		return err
	}
	return o.printer.PrintObj(u, out)
}

func apiError(obj runtime.Object) error {
	if st, ok := obj.(*metav1.Status); ok {
		return fmt.Errorf("%s", st.Message)
	}
	return fmt.Errorf("unexpected watch error %v", obj)
}

// List reads the Jobs of namespace ("" for all) matching selector, a page at a time, and
// returns them with the list's resourceVersion (the point a watch continues from).
func List(ctx context.Context, client kubernetes.Interface, namespace, selector string) ([]batchv1.Job, string, error) {
	return jobwatch.ListJobs(ctx, client, namespace, selector)
}

// ToList wraps jobs in the v1 List kubectl get -o json|yaml prints, each with apiVersion/kind.
// Unstructured, as kubectl get prints: the name printer accepts only unstructured lists, and
// custom columns then render quantities as "8", not as Go structs.
func ToList(jobs []batchv1.Job) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}, Items: []unstructured.Unstructured{}}
	for i := range jobs {
		u, err := toUnstructured(&jobs[i])
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *u)
	}
	return list, nil
}

// toUnstructured converts job, restoring apiVersion and kind (typed clients leave them empty).
func toUnstructured(job *batchv1.Job) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
	if err != nil {
		return nil, fmt.Errorf("converting job.batch/%s: %w", job.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("batch/v1")
	u.SetKind("Job")
	return u, nil
}
