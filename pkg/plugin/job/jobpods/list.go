package jobpods

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// PageSize bounds one pod list response; a 1,000-rank Job is read in two pages.
const PageSize = 500

// List reads the pods labelled with the Job's name, a page at a time, and the list's
// resourceVersion (every page is of the first page's snapshot: the point a watch continues
// from). The caller keeps only the Owned ones once it knows the Job's UID.
func List(ctx context.Context, client kubernetes.Interface, namespace, job string) ([]corev1.Pod, string, error) {
	return ListSelected(ctx, client, namespace, Selector(job))
}

// ListSelected reads the pods selector selects (Selector, UIDSelector), PageSize at a time, and
// the list's resourceVersion.
func ListSelected(ctx context.Context, client kubernetes.Interface, namespace, selector string) ([]corev1.Pod, string, error) {
	pods := []corev1.Pod{}
	rv, err := pages.Each(ctx, metav1.ListOptions{LabelSelector: selector, Limit: PageSize}, client.CoreV1().Pods(namespace).List,
		func(page *corev1.PodList) { pods = append(pods, page.Items...) })
	if err != nil {
		return nil, "", err
	}
	return pods, rv, nil
}

// ListOf reads the pods of job, a Job already read: one (paged) list, owned pods only.
func ListOf(ctx context.Context, client kubernetes.Interface, job *batchv1.Job) ([]corev1.Pod, error) {
	pods, _, err := List(ctx, client, job.Namespace, job.Name)
	if err != nil {
		return nil, err
	}
	return Keep(pods, job.UID), nil
}

// Fetch reads the Job and its pods: one get and one (paged) pod list, never a get per pod. The
// two go out together (one round trip, not two): pods are selected by the Job's name, which is
// known before the get returns, and those of another Job of the same name (another UID) are
// dropped afterwards. When the get fails the Job is nil and the error is the get's; when only
// the list fails the Job is returned with the list's error.
func Fetch(ctx context.Context, client kubernetes.Interface, namespace, name string) (*batchv1.Job, []corev1.Pod, error) {
	var (
		pods   []corev1.Pod
		podErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		pods, _, podErr = List(ctx, client, namespace, name)
	}()
	job, err := client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	<-done
	if err != nil {
		return nil, nil, err
	}
	if podErr != nil {
		return job, nil, podErr
	}
	return job, Keep(pods, job.UID), nil
}
