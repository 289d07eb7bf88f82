package jobcreate

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// CheckElasticServer refuses an elastic job on a server older than jobspec.ElasticMinMinor,
// which would keep its completions fixed or drop its success policy without a word.
func CheckElasticServer(ctx context.Context, client kubernetes.Interface) error {
	return checkServerMinor(ctx, client, "--nodes MIN:MAX", "elastic Indexed Jobs and Job success policies", "give --nodes N")
}

// CheckMPIServer refuses an MPI job on a server older than jobspec.ElasticMinMinor, which would
// drop its success policy without a word: rank 0's success would then never end the other pods,
// which wait to be stopped.
func CheckMPIServer(ctx context.Context, client kubernetes.Interface) error {
	return checkServerMinor(ctx, client, "--launcher mpi", "Job success policies", "leave out --launcher mpi")
}

// checkServerMinor refuses flag on a server older than 1.ElasticMinMinor, which lacks what.
func checkServerMinor(ctx context.Context, client kubernetes.Interface, flag, what, instead string) error {
	info, err := discovery.ToDiscoveryInterfaceWithContext(client.Discovery()).ServerVersionWithContext(ctx)
	if err != nil {
		return fmt.Errorf("reading the server's version for %s: %w", flag, err)
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return fmt.Errorf("reading the server's version %q for %s: %w", info.GitVersion, flag, err)
	}
	if v.Major() == 1 && v.Minor() < jobspec.ElasticMinMinor {
		return exitcode.Usagef("%s needs Kubernetes 1.%d or newer (%s); this cluster runs %s: %s",
			flag, jobspec.ElasticMinMinor, what, info.GitVersion, instead)
	}
	return nil
}

// ElasticStart chooses how many ranks an elastic job starts with: as many as fit on the free
// GPUs now, within MIN:MAX, after checking that the cluster can hold MIN at all (the capacity
// guard of a job of MIN ranks). why says the number and the reason, for stderr.
func ElasticStart(ctx context.Context, client kubernetes.Interface, s jobspec.Spec) (n int, why string, err error) {
	atMin := s
	atMin.Nodes = s.NodesMin
	// One list of the nodes serves the guard and the count of what is free.
	nodes, warning, err := checkNodes(ctx, client, gpufit.RequestFor(&atMin))
	if err != nil {
		return 0, "", err
	}
	rng := jobspec.FormatNodesRange(s.NodesMin, s.NodesMax)
	if warning != "" {
		return s.NodesMax, fmt.Sprintf("starting with %d ranks, the most of %s: %s", s.NodesMax, rng, warning), nil
	}
	usage, err := nodeusage.Usages(ctx, client)
	if apierrors.IsForbidden(err) {
		return s.NodesMax, fmt.Sprintf("starting with %d ranks, the most of %s: you may not list pods, so what is free now is unknown", s.NodesMax, rng), nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("listing pods for the free GPUs (skip it with --no-capacity-check): %w", err)
	}
	req := gpufit.RequestFor(&s)
	free := gpufit.SummarizeFree(nodes, nodeusage.Requested(usage), req)
	fit := free.PodsThatFit
	n = jobspec.ElasticSize(s.NodesMin, s.NodesMax, fit)
	var reason strings.Builder
	reason.WriteString("starting with " + strconv.Itoa(n) + " ranks of " + rng + ": ")
	switch {
	case fit >= int64(s.NodesMax):
		reason.WriteString("all fit in what is free now")
	case fit >= int64(s.NodesMin):
		fmt.Fprintf(&reason, "%d fit in what is free now%s; `kubectl tao scale %s --nodes %d` grows it when there is room", fit, boundBy(free, req, s.ShmQuantity() != nil), s.Name, s.NodesMax)
	default:
		fmt.Fprintf(&reason, "only %d fit in what is free now%s, so the job waits for %d", fit, boundBy(free, req, s.ShmQuantity() != nil), s.NodesMin)
	}
	return n, reason.String(), nil
}

// boundBy names what bounds the fit where it is not the GPUs: " (memory is what runs out
// first, on 1 node)", or "".
func boundBy(free gpufit.Summary, req gpufit.Request, shm bool) string {
	var worst corev1.ResourceName
	for name, nodes := range free.Bound {
		if name != req.GPUName() && (worst == "" || nodes > free.Bound[worst] || (nodes == free.Bound[worst] && name < worst)) {
			worst = name
		}
	}
	if worst == "" || free.Bound[worst] <= free.Bound[req.GPUName()] {
		return ""
	}
	extra := ""
	if worst == corev1.ResourceMemory && shm {
		extra = ", the memory-backed /dev/shm counted"
	}
	return fmt.Sprintf(" (%s runs out first, on %d of the nodes%s)", worst, free.Bound[worst], extra)
}
