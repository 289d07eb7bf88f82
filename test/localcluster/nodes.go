package localcluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GPUResource is the extended resource the NVIDIA device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Labels and annotations that mark the simulated nodes.
const (
	// KwokNodeAnnotation is what kwok's --manage-nodes-with-annotation-selector matches.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// NodeTypeLabel marks nodes this launcher created, so reconciling the node count never
	// touches a node someone else made.
	NodeTypeLabel = "type"
	NodeTypeKwok  = "kwok"
	// NodeNamePrefix names the nodes gpu-node-0, gpu-node-1, ...
	NodeNamePrefix = "gpu-node-"
)

// NodeShape is what every simulated node offers.
type NodeShape struct {
	GPUs int
	// KubeletPort is kwok's server port, where the apiserver fetches logs.
	KubeletPort int
}

// gfdLabels are the labels GPU Feature Discovery puts on an 8x H100 SXM node with driver
// 580.95.05 and CUDA 13.0, so node selectors written for real clusters work here unchanged.
func gfdLabels(gpus int) map[string]string {
	return map[string]string{
		"nvidia.com/gpu.present":                "true",
		"nvidia.com/gpu.product":                "NVIDIA-H100-80GB-HBM3",
		"nvidia.com/gpu.family":                 "hopper",
		"nvidia.com/gpu.count":                  strconv.Itoa(gpus),
		"nvidia.com/gpu.memory":                 "81559",
		"nvidia.com/gpu.compute.major":          "9",
		"nvidia.com/gpu.compute.minor":          "0",
		"nvidia.com/gpu.machine":                "PowerEdge-XE9680",
		"nvidia.com/gpu.replicas":               "1",
		"nvidia.com/gpu.sharing-strategy":       "none",
		"nvidia.com/gpu.mode":                   "compute",
		"nvidia.com/mig.capable":                "true",
		"nvidia.com/mig.strategy":               "single",
		"nvidia.com/cuda.driver-version.major":  "580",
		"nvidia.com/cuda.driver-version.minor":  "95",
		"nvidia.com/cuda.driver-version.rev":    "05",
		"nvidia.com/cuda.driver-version.full":   "580.95.05",
		"nvidia.com/cuda.runtime-version.major": "13",
		"nvidia.com/cuda.runtime-version.minor": "0",
		"nvidia.com/cuda.runtime-version.full":  "13.0",
		// GFD still publishes the pre-0.15 names; older selectors use them.
		"nvidia.com/cuda.driver.major":  "580",
		"nvidia.com/cuda.driver.minor":  "95",
		"nvidia.com/cuda.driver.rev":    "05",
		"nvidia.com/cuda.runtime.major": "13",
		"nvidia.com/cuda.runtime.minor": "0",
	}
}

// NodeName returns the name of the i-th simulated node.
func NodeName(i int) string { return NodeNamePrefix + strconv.Itoa(i) }

// BuildNode returns the Node object for the i-th simulated GPU node, created already Ready
// with the status kwok's node-initialize stage would write (addresses, kubelet endpoint,
// conditions). That saves one status write per node, which is what lets 5,000 nodes appear in
// about a minute on two cores; kwok still owns the node from then on (lease, heartbeats, pods).
func BuildNode(i int, shape NodeShape, now time.Time) *corev1.Node {
	name := NodeName(i)
	labels := gfdLabels(shape.GPUs)
	labels["kubernetes.io/hostname"] = name
	labels["kubernetes.io/os"] = "linux"
	labels["kubernetes.io/arch"] = "amd64"
	labels["node.kubernetes.io/instance-type"] = fmt.Sprintf("sim-%dx-h100", shape.GPUs)
	labels[NodeTypeLabel] = NodeTypeKwok
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(shape.GPUs), resource.DecimalSI),
	}
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: labels,
			Annotations: map[string]string{
				KwokNodeAnnotation:             "fake",
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions:  nodeConditions(metav1.NewTime(now)),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(shape.KubeletPort)}},
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            "amd64",
				OperatingSystem:         "linux",
				KubeletVersion:          KubernetesVersion,
				KubeProxyVersion:        KubernetesVersion,
				ContainerRuntimeVersion: "kwok-" + KwokVersion,
				KernelVersion:           "kwok-" + KwokVersion,
			},
		},
	}
}

// nodeConditions are the conditions of a healthy kubelet, as kwok reports them.
func nodeConditions(now metav1.Time) []corev1.NodeCondition {
	c := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		c(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "RouteController created a route"),
	}
}

// nodeIndex parses the index out of a name made by NodeName.
func nodeIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, NodeNamePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && NodeName(i) == name
}

// EnsureNodes makes the simulated nodes exactly gpu-node-0..count-1: it creates missing ones
// concurrently (thousands must appear in seconds) and deletes our nodes beyond count, so
// `GPU_NODES=N make cluster-up` on a running cluster reshapes it.
func EnsureNodes(ctx context.Context, cs kubernetes.Interface, count int, shape NodeShape, workers int) error {
	existing, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeTypeLabel + "=" + NodeTypeKwok})
	if err != nil {
		return fmt.Errorf("list simulated nodes: %w", err)
	}
	have := map[int]bool{}
	var extra []string
	for _, n := range existing.Items {
		i, ok := nodeIndex(n.Name)
		if ok && i < count {
			have[i] = true
			continue
		}
		extra = append(extra, n.Name)
	}
	sort.Strings(extra)

	jobs := make(chan func() error)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < max(1, workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				if err := job(); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	send := func(job func() error) bool {
		select {
		case jobs <- job:
			return true
		case <-ctx.Done():
			return false
		case err := <-errs:
			// Put it back for the final report and stop feeding work.
			errs <- err
			return false
		}
	}
	for i := 0; i < count; i++ {
		if have[i] {
			continue
		}
		node := BuildNode(i, shape, time.Now())
		if !send(func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create node %s: %w", node.Name, err)
			}
			return nil
		}) {
			break
		}
	}
	for _, name := range extra {
		if !send(func() error {
			err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete surplus node %s: %w", name, err)
			}
			return nil
		}) {
			break
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create simulated nodes: %w", err)
	}
	return nil
}

// CountNodeLeases returns how many of our nodes have a Lease, which kwok creates when it takes
// a node over: the proof that kwok, not just the initial status, makes the nodes Ready.
func CountNodeLeases(ctx context.Context, cs kubernetes.Interface) (int, error) {
	list, err := cs.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("list node leases: %w", err)
	}
	n := 0
	for _, l := range list.Items {
		if _, ok := nodeIndex(l.Name); ok {
			n++
		}
	}
	return n, nil
}

// CountReadyNodes returns how many of our simulated nodes exist and how many are Ready.
func CountReadyNodes(ctx context.Context, cs kubernetes.Interface) (total, ready int, err error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeTypeLabel + "=" + NodeTypeKwok, ResourceVersion: "0"})
	if err != nil {
		return 0, 0, fmt.Errorf("list simulated nodes: %w", err)
	}
	for _, n := range list.Items {
		total++
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return total, ready, nil
}
