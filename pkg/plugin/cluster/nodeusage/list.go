// Package nodeusage reads what the nodes offer and what the pods bound to them request, a page
// at a time: the reads behind `kubectl tao capacity`, preflight's fit check and submit's
// capacity guard.
package nodeusage

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// PageSize bounds one list response; big clusters are read in pages. 250, not 500: one page's
// decoding is most of capacity's heap, and the smaller page lowers its peak for a few more
// requests (docs/benchmarks.md, "capacity").
const PageSize = 250

// ActivePods selects pods that may still hold resources on their node.
const ActivePods = "status.phase!=Succeeded,status.phase!=Failed"

// EachNodePage lists the nodes matching selector a page at a time and hands each page to fn, so a
// caller that keeps only what it needs never holds every node at once.
func EachNodePage(ctx context.Context, client kubernetes.Interface, selector string, fn func([]corev1.Node)) error {
	_, err := pages.Each(ctx, metav1.ListOptions{Limit: PageSize, LabelSelector: selector}, client.CoreV1().Nodes().List,
		func(page *corev1.NodeList) { fn(page.Items) })
	return err
}

// ListNodes reads every node matching selector.
func ListNodes(ctx context.Context, client kubernetes.Interface, selector string) ([]corev1.Node, error) {
	var nodes []corev1.Node
	err := EachNodePage(ctx, client, selector, func(page []corev1.Node) { nodes = append(nodes, page...) })
	return nodes, err
}

// Usages reads the non-terminal pods of every namespace, a page at a time, and sums what they
// request per node.
func Usages(ctx context.Context, client kubernetes.Interface) (map[string]*Usage, error) {
	usage := map[string]*Usage{}
	_, err := pages.Each(ctx, metav1.ListOptions{Limit: PageSize, FieldSelector: ActivePods}, client.CoreV1().Pods(metav1.NamespaceAll).List,
		func(page *corev1.PodList) { AddPods(usage, page.Items) })
	if err != nil {
		return nil, err
	}
	return usage, nil
}
