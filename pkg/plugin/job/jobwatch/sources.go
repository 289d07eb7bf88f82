package jobwatch

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// ListJob lists the Job named name: one request (by field selector, so that a Job that is
// gone reads as an empty list, not an error), and a resourceVersion to watch it from.
func ListJob(ctx context.Context, client kubernetes.Interface, ns, name string) ([]batchv1.Job, string, error) {
	l, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{FieldSelector: byName(name)})
	if err != nil {
		return nil, "", err
	}
	return l.Items, l.ResourceVersion, nil
}

// ListJobs lists the Jobs that selector selects, PageSize at a time.
func ListJobs(ctx context.Context, client kubernetes.Interface, ns, selector string) ([]batchv1.Job, string, error) {
	var jobs []batchv1.Job
	rv, err := pages.Each(ctx, metav1.ListOptions{LabelSelector: selector, Limit: PageSize}, client.BatchV1().Jobs(ns).List,
		func(page *batchv1.JobList) { jobs = append(jobs, page.Items...) })
	if err != nil {
		return nil, "", err
	}
	return jobs, rv, nil
}

func byName(name string) string { return fields.OneTermEqualSelector("metadata.name", name).String() }

// JobSource lists and watches the Job named name.
func JobSource(client kubernetes.Interface, ns, name string) Source {
	return Source{
		What: "job.batch/" + name,
		List: func(ctx context.Context) ([]runtime.Object, string, error) {
			jobs, rv, err := ListJob(ctx, client, ns, name)
			return jobObjects(jobs), rv, err
		},
		Watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return client.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{FieldSelector: byName(name), ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	}
}

// JobsSource lists and watches the Jobs that selector selects (list --watch).
func JobsSource(client kubernetes.Interface, ns, selector string) Source {
	return Source{
		What: "jobs",
		List: func(ctx context.Context) ([]runtime.Object, string, error) {
			jobs, rv, err := ListJobs(ctx, client, ns, selector)
			return jobObjects(jobs), rv, err
		},
		Watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return client.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	}
}

// PodSource lists and watches the pods that selector selects; what names them in a failure.
func PodSource(client kubernetes.Interface, ns, selector, what string) Source {
	return Source{
		Pod:  true,
		What: what,
		List: func(ctx context.Context) ([]runtime.Object, string, error) {
			pods, rv, err := jobpods.ListSelected(ctx, client, ns, selector)
			objs := make([]runtime.Object, len(pods))
			for i := range pods {
				objs[i] = &pods[i]
			}
			return objs, rv, err
		},
		Watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	}
}

func jobObjects(jobs []batchv1.Job) []runtime.Object {
	objs := make([]runtime.Object, len(jobs))
	for i := range jobs {
		objs[i] = &jobs[i]
	}
	return objs
}
