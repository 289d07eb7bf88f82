// Package kueue is what kubectl-tao knows of Kueue (https://kueue.sigs.k8s.io), read without its
// Go module: discovery says whether the kueue.x-k8s.io API is served and in which version, and
// the dynamic client reads LocalQueues. submit --queue and preflight --queue share it.
package kueue

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Group is Kueue's API group.
const Group = "kueue.x-k8s.io"

// Versions are the API versions tried, newest first. Kueue v0.17 serves v1beta2 (stored) and
// v1beta1 (deprecated); older releases serve only v1beta1. The LocalQueue fields read here
// (metadata only) are the same in both.
var Versions = []string{"v1beta2", "v1beta1"}

// LocalQueues is the resource of a LocalQueue.
const LocalQueues = "localqueues"

// InstallDocs is where Kueue's installation is explained.
const InstallDocs = "https://kueue.sigs.k8s.io/docs/installation/"

// Discover returns the version of Kueue's API that serves LocalQueues, or "" when Kueue is not
// installed. It costs one request on a current Kueue (v1beta2), two on an older one or none.
func Discover(ctx context.Context, d discovery.DiscoveryInterface) (string, error) {
	dc := discovery.ToDiscoveryInterfaceWithContext(d)
	for _, v := range Versions {
		list, err := dc.ServerResourcesForGroupVersionWithContext(ctx, Group+"/"+v)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		for _, r := range list.APIResources {
			if r.Name == LocalQueues {
				return v, nil
			}
		}
	}
	return "", nil
}

// GVR is the LocalQueue resource in API version v.
func GVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: version, Resource: LocalQueues}
}

// List returns the names of the LocalQueues in namespace ns, sorted (one list; namespaces hold
// a handful of queues).
func List(ctx context.Context, dyn dynamic.Interface, version, ns string) ([]string, error) {
	list, err := dyn.Resource(GVR(version)).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, q := range list.Items {
		names = append(names, q.GetName())
	}
	sort.Strings(names)
	return names, nil
}

// Names renders queue names for a message: "a, b" or "none".
func Names(queues []string) string {
	if len(queues) == 0 {
		return "none"
	}
	return strings.Join(queues, ", ")
}

// NotInstalled is the message for --queue on a cluster without Kueue.
func NotInstalled(queue string) string {
	return fmt.Sprintf("--queue %s: Kueue is not installed on this cluster (the API server serves no %s API), "+
		"so nothing would ever admit the job and it would stay suspended forever", queue, Group)
}

// Missing is the message for a LocalQueue that does not exist; queues are those that do.
func Missing(queue, ns string, queues []string, listErr error) string {
	msg := fmt.Sprintf("--queue %s: there is no LocalQueue %q in namespace %s", queue, queue, ns)
	if listErr == nil {
		msg += " (LocalQueues there: " + Names(queues) + ")"
	}
	return msg + fmt.Sprintf("; list them with `kubectl get localqueues -n %s`, or ask the cluster admin for one", ns)
}

// Check is what submit --queue verifies before creating anything: Kueue is installed, the
// LocalQueue exists (a get, plus a list only when it does not, to name those that do), its
// ClusterQueue's quota can ever hold gpus of the GPU resource gpu (one more get; see NeverFits), and the
// WorkloadPriorityClass priorityClass exists ("" for none; one more get). A user who may not
// read them gets a warning on warn and the submit goes on: Kueue itself then decides.
func Check(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface, ns, queue string, gpu corev1.ResourceName, gpus int64, priorityClass string, warn io.Writer) error {
	version, err := Discover(ctx, d)
	if apierrors.IsForbidden(err) {
		fmt.Fprintf(warn, "Warning: could not check that Kueue is installed (%v); submitting to queue %s anyway\n", apierrors.ReasonForError(err), queue)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--queue %s: checking that Kueue is installed: %w", queue, err)
	}
	if version == "" {
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s; install Kueue (%s) or submit without --queue", NotInstalled(queue), InstallDocs))
	}
	lq, err := dyn.Resource(GVR(version)).Namespace(ns).Get(ctx, queue, metav1.GetOptions{})
	ok := err == nil
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if apierrors.IsForbidden(err) {
		fmt.Fprintf(warn, "Warning: could not check that LocalQueue %s exists in namespace %s (%v); submitting anyway\n", queue, ns, apierrors.ReasonForError(err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("--queue %s: reading LocalQueue %s in namespace %s: %w", queue, queue, ns, err)
	}
	if !ok {
		queues, listErr := List(ctx, dyn, version, ns)
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s", Missing(queue, ns, queues, listErr)))
	}
	never, err := neverFitsIn(ctx, dyn, version, lq, gpu, gpus)
	if err != nil {
		fmt.Fprintf(warn, "Warning: could not read the ClusterQueue of LocalQueue %s (%v); not checking that its quota can hold the job\n", queue, apierrors.ReasonForError(err))
		return nil
	}
	if never != "" {
		return exitcode.WithCode(exitcode.NoCapacity, fmt.Errorf("--queue %s: the job %s; ask for fewer GPUs or nodes, or another queue", queue, never))
	}
	return checkPriorityClass(ctx, dyn, version, priorityClass, warn)
}

// WorkloadPriorityClasses is the resource of Kueue's WorkloadPriorityClass (cluster-scoped).
const WorkloadPriorityClasses = "workloadpriorityclasses"

// checkPriorityClass refuses a WorkloadPriorityClass that does not exist: Kueue would refuse the
// Job's Workload, and the job would never be admitted. Its error names those that exist.
func checkPriorityClass(ctx context.Context, dyn dynamic.Interface, version, name string, warn io.Writer) error {
	if name == "" {
		return nil
	}
	ri := dyn.Resource(gvr(version, WorkloadPriorityClasses))
	_, err := ri.Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		msg := fmt.Sprintf("--priority-class %s: there is no Kueue WorkloadPriorityClass %q (with --queue, --priority-class names one)", name, name)
		if list, lerr := ri.List(ctx, metav1.ListOptions{}); lerr == nil {
			names := make([]string, len(list.Items))
			for i := range list.Items {
				names[i] = list.Items[i].GetName()
			}
			sort.Strings(names)
			msg += "; WorkloadPriorityClasses: " + Names(names)
		}
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s; list them with `kubectl get workloadpriorityclasses`", msg))
	default:
		fmt.Fprintf(warn, "Warning: could not check that WorkloadPriorityClass %s exists (%v); submitting anyway\n", name, apierrors.ReasonForError(err))
		return nil
	}
}

// WarnUnqueued writes one warning line on warn when a job of nodes ranks goes in without a queue
// on a cluster where Kueue is installed: without Kueue's all-or-nothing admission some ranks may
// start while others wait for GPUs, and those that started wait at the rendezvous. One discovery
// request; a failed one says nothing (it is advice, not a check).
func WarnUnqueued(ctx context.Context, d discovery.DiscoveryInterface, nodes int, warn io.Writer) {
	if version, err := Discover(ctx, d); err == nil && version != "" {
		fmt.Fprintf(warn, "Warning: Kueue is installed on this cluster but this %d-node job has no --queue: nothing admits its ranks "+
			"together, so some may start while others wait for GPUs (`kubectl get localqueues` lists the queues)\n", nodes)
	}
}
