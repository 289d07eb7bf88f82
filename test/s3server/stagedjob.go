package s3server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// StagedJob creates, on the local (KWOK) cluster, a Job as submit wires one for S3 staging
// against this server: the outputs and Secret annotations, and a NAME-s3 Secret with the
// server's credentials for bucket, owned by the Job. Its pod follows the simulator's fate
// ("succeed", "run-forever", ...) after a second. delete-artifacts and results then have a run
// to work on without the stager image.
func (s *Server) StagedJob(t testing.TB, client kubernetes.Interface, ns, name, fate, bucket string) *batchv1.Job {
	t.Helper()
	ctx := context.Background()
	outs, _ := json.Marshal([]string{"/results"})
	job, err := client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
			s3layout.AnnotationOutputs: string(outs), s3layout.AnnotationS3Secret: s3layout.SecretName(name),
		}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					"sim.kubectl-tao.dev/fate": fate, "sim.kubectl-tao.dev/run-duration": "1s",
				}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "tao", Image: "img"}},
					Tolerations:   []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for _, kv := range s.Env(bucket) {
		k, v, _ := strings.Cut(kv, "=")
		data[k] = []byte(v)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s3layout.SecretName(name), Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}},
		Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return job
}
