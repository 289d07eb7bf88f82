package preflightcheck

import (
	"context"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/permissions"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
)

// Targets are what Gather reads from and what it asks about: the cluster's clients, the
// namespace, the job to fit, the pull secrets and the LocalQueue it names ("" for none).
type Targets struct {
	Client kubernetes.Interface
	// Dynamic may be nil when Kueue is not to be looked at.
	Dynamic     dynamic.Interface
	Namespace   string
	Request     gpufit.Request
	PullSecrets []string
	Queue       string
}

// Gather reads what the checks need. The server version comes first: if the cluster cannot be
// reached nothing else is tried. Then every read and access review runs at once.
//
// Kueue costs one discovery request (two on an older Kueue or none) and, where it is installed,
// one list of the namespace's LocalQueues; with --queue naming one of them, two gets more (it
// and its ClusterQueue).
func Gather(ctx context.Context, t Targets) Facts {
	client, dyn, ns, r := t.Client, t.Dynamic, t.Namespace, t.Request
	f := Facts{Namespace: ns, Request: r, Queue: t.Queue}
	f.PullSecrets = make([]PullSecret, len(t.PullSecrets))
	f.Version, f.VersionErr = discovery.ToDiscoveryInterfaceWithContext(client.Discovery()).ServerVersionWithContext(ctx)
	if f.VersionErr != nil {
		return f
	}
	var wg sync.WaitGroup
	f.Reviews = make([]Review, len(permissions.Needed))
	for i, a := range permissions.Needed {
		wg.Go(func() { f.Reviews[i] = review(ctx, client, ns, a) })
	}
	wg.Go(func() { _, f.NamespaceErr = client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}) })
	wg.Go(func() { f.Nodes, f.NodesErr = nodeusage.ListNodes(ctx, client, "") })
	if r.GPUsPerPod() > 0 {
		wg.Go(func() {
			usage, err := nodeusage.Usages(ctx, client)
			f.Requested, f.PodsErr = nodeusage.Requested(usage), err
		})
	}
	wg.Go(func() { f.DaemonSets, f.DaemonSetsErr = gpuDaemonSets(ctx, client) })
	wg.Go(func() { f.Exporters, f.ProxyAllowed, f.ExportersErr = gpuExporters(ctx, client) })
	if dyn != nil {
		wg.Go(func() {
			f.KueueVersion, f.KueueErr = kueue.Discover(ctx, client.Discovery())
			if f.KueueErr == nil && f.KueueVersion != "" {
				f.Queues, f.QueuesErr = kueue.List(ctx, dyn, f.KueueVersion, ns)
			}
			if f.QueuesErr == nil && slices.Contains(f.Queues, t.Queue) {
				gpus := r.GPUsPerPod() * r.Pods
				f.ClusterQueue, f.NeverFits, f.ClusterQueueErr = kueue.Target(ctx, dyn, f.KueueVersion, ns, t.Queue, r.GPUName(), gpus)
			}
		})
	}
	for i, name := range t.PullSecrets {
		wg.Go(func() {
			f.PullSecrets[i].Name = name
			f.PullSecrets[i].Secret, f.PullSecrets[i].Err = client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		})
	}
	wg.Wait()
	return f
}

func review(ctx context.Context, client kubernetes.Interface, ns string, a permissions.Access) Review {
	ssar := &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: a.Attributes(ns)}}
	got, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
	if err != nil {
		return Review{Access: a, Err: err}
	}
	return Review{Access: a, Allowed: got.Status.Allowed}
}

// gpuDaemonSets pages through the DaemonSets of every namespace, keeping only GPU Operator and
// device plugin ones, and stops at the first page that has one.
func gpuDaemonSets(ctx context.Context, client kubernetes.Interface) ([]appsv1.DaemonSet, error) {
	var found []appsv1.DaemonSet
	opts := metav1.ListOptions{Limit: nodeusage.PageSize}
	for {
		page, err := client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			if IsGPUOperator(&page.Items[i]) {
				found = append(found, page.Items[i])
			}
		}
		if len(found) > 0 || page.Continue == "" {
			return found, nil
		}
		opts.Continue = page.Continue
	}
}

// gpuExporters finds dcgm-exporter on the nodes and asks whether its pods may be read through
// the pod proxy, one access review per namespace it runs in.
func gpuExporters(ctx context.Context, client kubernetes.Interface) (map[string]*corev1.Pod, map[string]bool, error) {
	exporters, err := jobtop.FindExporters(ctx, client)
	if err != nil && len(exporters) == 0 {
		return nil, nil, err
	}
	allowed := map[string]bool{}
	for _, p := range exporters {
		if _, done := allowed[p.Namespace]; done {
			continue
		}
		a := permissions.GPUMetrics[0]
		r := review(ctx, client, p.Namespace, a)
		allowed[p.Namespace] = r.Err == nil && r.Allowed
	}
	return exporters, allowed, nil
}
