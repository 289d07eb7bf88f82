package status

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/pages"
)

// podPageSize bounds one pod list response; a 1,000-rank Job is read in two pages.
const podPageSize = 500

// ControllerUIDLabel is the label the Job controller puts on every pod of a Job. Selecting on
// the UID, not the name, never mixes in the pods of an older Job of the same name.
const ControllerUIDLabel = "batch.kubernetes.io/controller-uid"

// Fetch reads the Job and its pods: one get and one (paged) pod list, never a get per pod. The
// two go out together (one round trip, not two): pods are selected by the Job's name, which is
// known before the get returns, and those of another Job of the same name (another UID) are
// dropped afterwards.
func Fetch(ctx context.Context, client kubernetes.Interface, namespace, name string) (*batchv1.Job, []corev1.Pod, error) {
	var (
		pods   []corev1.Pod
		podErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		pods, podErr = listPods(ctx, client, namespace, labels.Set{JobNameLabel: name}.String())
	}()
	job, err := client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	<-done
	if err != nil {
		return nil, nil, err
	}
	if podErr != nil {
		return job, nil, podErr
	}
	mine := pods[:0]
	for _, p := range pods {
		if p.Labels[ControllerUIDLabel] == string(job.UID) {
			mine = append(mine, p)
		}
	}
	return job, mine, nil
}

// JobNameLabel is the label the Job controller puts on every pod with the Job's name; every
// server version sets it (batch.kubernetes.io/job-name only from 1.27).
const JobNameLabel = "job-name"

// ListPods lists the pods of job by its controller UID, a page at a time.
func ListPods(ctx context.Context, client kubernetes.Interface, job *batchv1.Job) ([]corev1.Pod, error) {
	return listPods(ctx, client, job.Namespace, labels.Set{ControllerUIDLabel: string(job.UID)}.String())
}

func listPods(ctx context.Context, client kubernetes.Interface, namespace, selector string) ([]corev1.Pod, error) {
	pods := []corev1.Pod{}
	_, err := pages.Each(ctx, metav1.ListOptions{LabelSelector: selector, Limit: podPageSize}, client.CoreV1().Pods(namespace).List,
		func(page *corev1.PodList) { pods = append(pods, page.Items...) })
	if err != nil {
		return nil, err
	}
	return pods, nil
}
