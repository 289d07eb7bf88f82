package status

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// podPageSize bounds one pod list response; a 1,000-rank Job is read in two pages.
const podPageSize = 500

// ControllerUIDLabel is the label the Job controller puts on every pod of a Job. Selecting on
// the UID, not the name, never mixes in the pods of an older Job of the same name.
const ControllerUIDLabel = "batch.kubernetes.io/controller-uid"

// Fetch reads the Job and its pods: one get and one (paged) pod list, never a get per pod.
func Fetch(ctx context.Context, client kubernetes.Interface, namespace, name string) (*batchv1.Job, []corev1.Pod, error) {
	job, err := client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods, err := ListPods(ctx, client, job)
	return job, pods, err
}

// ListPods lists the pods of job by its controller UID, a page at a time.
func ListPods(ctx context.Context, client kubernetes.Interface, job *batchv1.Job) ([]corev1.Pod, error) {
	opts := metav1.ListOptions{
		LabelSelector: labels.Set{ControllerUIDLabel: string(job.UID)}.String(),
		Limit:         podPageSize,
	}
	pods := []corev1.Pod{}
	for {
		page, err := client.CoreV1().Pods(job.Namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		pods = append(pods, page.Items...)
		if page.Continue == "" {
			return pods, nil
		}
		opts.Continue = page.Continue
	}
}
