package util

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// ValidateRank checks --rank, which exec and port-forward share.
func ValidateRank(rank int) error {
	if rank < 0 {
		return exitcode.Usagef("--rank must be 0 or more, got %d", rank)
	}
	return nil
}

// RankTarget is what exec and port-forward stream to: the rank's pod, the client that found
// it, and the REST config kubectl's executors dial the API server with.
type RankTarget struct {
	Client kubernetes.Interface
	Pod    *corev1.Pod
	Config *rest.Config
}

// FindRank reads the job and its pods (one get, one list), picks the rank's pod and sets up
// the REST config for streaming to it.
func FindRank(ctx context.Context, f Factory, ns, job string, rank int) (RankTarget, error) {
	client, err := f.KubernetesClient()
	if err != nil {
		return RankTarget{}, err
	}
	j, pods, err := jobpods.Fetch(ctx, client, ns, job)
	if err != nil {
		return RankTarget{}, err
	}
	pod, err := jobpods.Resolve(job, jobpods.Ranks(j), pods, rank)
	if err != nil {
		return RankTarget{}, err
	}
	cfg, err := CoreRESTConfig(f)
	if err != nil {
		return RankTarget{}, err
	}
	return RankTarget{Client: client, Pod: pod, Config: cfg}, nil
}
