// Package pages reads a list from the API server a page at a time (metav1.ListOptions.Limit and
// Continue), the one loop every paged list of the plugin shares.
package pages

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// List is a typed list (*corev1.PodList, *batchv1.JobList, ...): what a page carries besides
// its items.
type List interface {
	GetContinue() string
	GetResourceVersion() string
}

// Each calls list from opts (which sets the page size) until the last page, and hands every
// page to visit, so that a caller keeps only what it needs. It returns the first page's
// resourceVersion: every page of one paged list is of that snapshot, the point a watch
// continues from. On an error the pages visited so far stay visited.
//
// list is a typed client's List method, e.g. client.CoreV1().Pods(ns).List.
func Each[L List](ctx context.Context, opts metav1.ListOptions, list func(context.Context, metav1.ListOptions) (L, error), visit func(L)) (string, error) {
	rv := ""
	for {
		page, err := list(ctx, opts)
		if err != nil {
			return rv, err
		}
		if rv == "" {
			rv = page.GetResourceVersion()
		}
		visit(page)
		if page.GetContinue() == "" {
			return rv, nil
		}
		opts.Continue = page.GetContinue()
	}
}
