package localcluster

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
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
	// KubeletVersion is the kubelet version the nodes report: the cluster's release (empty:
	// the default).
	KubeletVersion string
}

func (s NodeShape) kubeletVersion() string {
	if s.KubeletVersion == "" {
		return DefaultKubernetesVersion
	}
	return s.KubeletVersion
}

// GPUProduct is one GPU model the simulated nodes can carry: what GPU Feature Discovery reads off
// such a GPU and writes into its labels.
type GPUProduct struct {
	// Name is GFD's nvidia.com/gpu.product, the value ResourceFlavors and node selectors name.
	Name string
	// Short names the product in the launcher's flags and the nodes' instance type (sim-8x-h100).
	Short  string
	Family string
	// MemoryMiB is nvidia.com/gpu.memory: the memory the driver reports, in MiB.
	MemoryMiB                  int
	ComputeMajor, ComputeMinor int
	// Machine is nvidia.com/gpu.machine: the host's DMI product name, spaces made dashes.
	Machine string
}

// GPUProducts are the products the launcher knows, the default (every node's at creation) first.
// Both are 8-GPU SXM machines on the same driver and CUDA, as a cluster that grew from A100s to
// H100s often is, so only the GPU's own labels differ between them.
var GPUProducts = []GPUProduct{
	{Name: "NVIDIA-H100-80GB-HBM3", Short: "h100", Family: "hopper", MemoryMiB: 81559, ComputeMajor: 9, ComputeMinor: 0, Machine: "PowerEdge-XE9680"},
	{Name: "NVIDIA-A100-SXM4-80GB", Short: "a100", Family: "ampere", MemoryMiB: 81920, ComputeMajor: 8, ComputeMinor: 0, Machine: "DGXA100-920-23687-2530-000"},
}

// DefaultGPUProduct is the product every simulated node carries until `relabel` changes it.
func DefaultGPUProduct() GPUProduct { return GPUProducts[0] }

// LookupGPUProduct finds a product by its GFD name or its short name, in any case.
func LookupGPUProduct(name string) (GPUProduct, error) {
	var known []string
	for _, p := range GPUProducts {
		if strings.EqualFold(name, p.Name) || strings.EqualFold(name, p.Short) {
			return p, nil
		}
		known = append(known, p.Short+" ("+p.Name+")")
	}
	return GPUProduct{}, fmt.Errorf("unknown GPU product %q: want one of %s", name, strings.Join(known, ", "))
}

// instanceType is the node.kubernetes.io/instance-type of a simulated node of this product.
func (p GPUProduct) instanceType(gpus int) string {
	return fmt.Sprintf("sim-%dx-%s", gpus, p.Short)
}

// gfdLabels are the labels GPU Feature Discovery puts on a node of gpus GPUs of product p with
// driver 580.95.05 and CUDA 13.0, so node selectors (and ResourceFlavors' nodeLabels) written
// for real clusters work here unchanged. Every product yields the same keys, so relabelling a
// node replaces values and never leaves another product's label behind.
func gfdLabels(p GPUProduct, gpus int) map[string]string {
	return map[string]string{
		"nvidia.com/gpu.present":                "true",
		"nvidia.com/gpu.product":                p.Name,
		"nvidia.com/gpu.family":                 p.Family,
		"nvidia.com/gpu.count":                  strconv.Itoa(gpus),
		"nvidia.com/gpu.memory":                 strconv.Itoa(p.MemoryMiB),
		"nvidia.com/gpu.compute.major":          strconv.Itoa(p.ComputeMajor),
		"nvidia.com/gpu.compute.minor":          strconv.Itoa(p.ComputeMinor),
		"nvidia.com/gpu.machine":                p.Machine,
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

// productLabels are the labels that say which GPU product a simulated node of gpus GPUs has:
// GFD's and the instance type. BuildNode starts from them and RelabelNodes patches them.
func productLabels(p GPUProduct, gpus int) map[string]string {
	labels := gfdLabels(p, gpus)
	labels["node.kubernetes.io/instance-type"] = p.instanceType(gpus)
	return labels
}

// NodeName returns the name of the i-th simulated node.
func NodeName(i int) string { return NodeNamePrefix + strconv.Itoa(i) }

// BuildNode returns the Node object for the i-th simulated GPU node, created already Ready
// with the status kwok's node-initialize stage would write (addresses, kubelet endpoint,
// conditions). That saves one status write per node, which is what lets 5,000 nodes appear in
// about a minute on two cores; kwok still owns the node from then on (lease, heartbeats, pods).
func BuildNode(i int, shape NodeShape, now time.Time) *corev1.Node {
	name := NodeName(i)
	labels := productLabels(DefaultGPUProduct(), shape.GPUs)
	labels["kubernetes.io/hostname"] = name
	labels["kubernetes.io/os"] = "linux"
	labels["kubernetes.io/arch"] = "amd64"
	labels[NodeTypeLabel] = NodeTypeKwok
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   *resource.NewQuantity(PodsPerNode, resource.DecimalSI),
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
				KubeletVersion:          shape.kubeletVersion(),
				KubeProxyVersion:        shape.kubeletVersion(),
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

// NodeProduct is the GPU product a simulated node carries.
type NodeProduct struct {
	Node, Product string
}

// RelabelNodes gives the last count simulated nodes (by index) product p's labels and every
// other simulated node the default product's: `relabel --product a100 --product-nodes 2` turns
// the cluster into a mixed one, `--product-nodes 0` back into the one `up` made. Only labels
// change (a merge patch), so pods already bound stay where they are; it returns every simulated
// node's product after the change, by index.
func RelabelNodes(ctx context.Context, cs kubernetes.Interface, p GPUProduct, count int) ([]NodeProduct, error) {
	nodes, err := simulatedNodes(ctx, cs)
	if err != nil {
		return nil, err
	}
	if count < 0 || count > len(nodes) {
		return nil, fmt.Errorf("cannot give %d of the %d simulated nodes the product %s", count, len(nodes), p.Name)
	}
	out := make([]NodeProduct, len(nodes))
	for k, n := range nodes {
		product := DefaultGPUProduct()
		if k >= len(nodes)-count {
			product = p
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": productLabels(product, gpuCount(n))}})
		if err != nil {
			return nil, err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("relabel node %s: %w", n.Name, err)
		}
		out[k] = NodeProduct{Node: n.Name, Product: product.Name}
	}
	return out, nil
}

// simulatedNodes lists the simulated nodes, by index.
func simulatedNodes(ctx context.Context, cs kubernetes.Interface) ([]*corev1.Node, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeTypeLabel + "=" + NodeTypeKwok})
	if err != nil {
		return nil, fmt.Errorf("list simulated nodes: %w", err)
	}
	index := map[*corev1.Node]int{}
	var nodes []*corev1.Node
	for k := range list.Items {
		if i, ok := nodeIndex(list.Items[k].Name); ok {
			index[&list.Items[k]] = i
			nodes = append(nodes, &list.Items[k])
		}
	}
	sort.Slice(nodes, func(a, b int) bool { return index[nodes[a]] < index[nodes[b]] })
	return nodes, nil
}

// gpuCount is how many GPUs the simulated node was made with: GPU Feature Discovery's
// nvidia.com/gpu.count label, which stays when MIGNodes slices its GPUs.
func gpuCount(n *corev1.Node) int {
	if c, err := strconv.Atoi(n.Labels["nvidia.com/gpu.count"]); err == nil {
		return c
	}
	gpus := n.Status.Capacity[GPUResource]
	return int(gpus.Value())
}

// NodeResource is the GPU resource a simulated node advertises.
type NodeResource struct {
	Node     string
	Resource corev1.ResourceName
}

// MIGResource is the resource a sliced simulated node advertises, as the GPU Operator's MIG
// mixed strategy does for GPUs cut into 1g.10gb slices, MIGSlicesPerGPU of them per GPU.
const MIGResource corev1.ResourceName = gpustandin.MIGResourcePrefix + MIGProfile

// MIGProfile is the profile of MIGResource's slices.
const MIGProfile = gpustandin.MIGProfile

// MIGSlicesPerGPU is how many MIGResource slices one simulated GPU is cut into, as an A100
// 80GB is into 1g.10gb slices; migStrategyLabel is GPU Feature Discovery's label of the strategy.
const (
	MIGSlicesPerGPU  = 7
	migStrategyLabel = "nvidia.com/mig.strategy"
)

// MIGNodes makes the last count simulated nodes advertise MIGResource instead of whole GPUs
// (MIGSlicesPerGPU per GPU, labelled nvidia.com/mig.strategy=mixed), and every other simulated
// node its whole GPUs again (strategy single), as `up` made it: `mig --mig-nodes 2` makes the cluster mixed,
// `--mig-nodes 0` undoes it. kwok keeps a node's status resources once set (see the
// node-initialize stage), so the change lasts; pods already bound stay where they are. It
// returns every simulated node's GPU resource after the change, by index.
func MIGNodes(ctx context.Context, cs kubernetes.Interface, count int) ([]NodeResource, error) {
	nodes, err := simulatedNodes(ctx, cs)
	if err != nil {
		return nil, err
	}
	if count < 0 || count > len(nodes) {
		return nil, fmt.Errorf("cannot slice %d of the %d simulated nodes", count, len(nodes))
	}
	out := make([]NodeResource, len(nodes))
	for k, n := range nodes {
		gpus := int64(gpuCount(n))
		// A merge patch's null removes a key: each node advertises one of the two.
		res := map[string]any{string(GPUResource): strconv.FormatInt(gpus, 10), string(MIGResource): nil}
		// GFD labels every MIG-capable node with its strategy, single when none is cut.
		strategy := "single"
		out[k] = NodeResource{Node: n.Name, Resource: GPUResource}
		if k >= len(nodes)-count {
			res = map[string]any{string(GPUResource): nil, string(MIGResource): strconv.FormatInt(gpus*MIGSlicesPerGPU, 10)}
			strategy = "mixed"
			out[k].Resource = MIGResource
		}
		status, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": res, "allocatable": res}})
		if err != nil {
			return nil, err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
			return nil, fmt.Errorf("slice node %s: %w", n.Name, err)
		}
		labels, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{migStrategyLabel: strategy}}})
		if err != nil {
			return nil, err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, labels, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("label node %s: %w", n.Name, err)
		}
	}
	return out, nil
}

// MIG is MIGNodes on the running cluster in cfg.StateDir (`localcluster mig`). A test that
// slices nodes runs it again with count 0 when it ends, so later tests see whole GPUs only.
func MIG(ctx context.Context, cfg Config, count int) ([]NodeResource, error) {
	var out []NodeResource
	err := onRunning(ctx, cfg, func(_ *cluster, admin *clients, _ *State) error {
		var err error
		out, err = MIGNodes(ctx, admin.cs, count)
		return err
	})
	return out, err
}

// Relabel is RelabelNodes on the running cluster in cfg.StateDir (`localcluster relabel`). A
// test that makes the cluster mixed runs it again with count 0 when it ends, so the tests after
// it see only nodes of the default product, as `up` made them.
func Relabel(ctx context.Context, cfg Config, product string, count int) ([]NodeProduct, error) {
	p, err := LookupGPUProduct(product)
	if err != nil {
		return nil, err
	}
	var out []NodeProduct
	err = onRunning(ctx, cfg, func(_ *cluster, admin *clients, _ *State) error {
		out, err = RelabelNodes(ctx, admin.cs, p, count)
		return err
	})
	return out, err
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
