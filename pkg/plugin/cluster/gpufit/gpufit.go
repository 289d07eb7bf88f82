// Package gpufit decides, from Node objects alone, whether a job's ranks can ever be placed.
// It is pure: the caller lists the nodes.
package gpufit

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// ErrNoGPUs is the contract's message when no node advertises any GPU.
var ErrNoGPUs = errors.New("No nvidia.com/gpu resources allocatable on the cluster: " +
	"install the NVIDIA GPU Operator (or the NVIDIA device plugin) so that GPU nodes advertise nvidia.com/gpu, " +
	"see https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html")

// Request is what a job asks for: Pods ranks, each needing PerPod (its GPU resource, cpu,
// memory, extended resources), on nodes that match Selector and whose taints Tolerations
// tolerate. GPU is the resource PerPod counts GPUs in: "" is whole GPUs (jobspec.GPUResource).
type Request struct {
	Pods        int64
	PerPod      corev1.ResourceList
	Selector    labels.Selector
	Tolerations []corev1.Toleration
	GPU         corev1.ResourceName
}

// GPUName is the GPU resource the request counts: GPU, else whole GPUs.
func (r Request) GPUName() corev1.ResourceName { return jobspec.GPUResourceOr(r.GPU) }

// GPUsPerPod is the request's GPUs (of GPUName) per rank.
func (r Request) GPUsPerPod() int64 {
	q := r.PerPod[r.GPUName()]
	return q.Value()
}

// Summary is what the nodes can hold for a request.
type Summary struct {
	// Nodes is every node seen; GPUNodes those with any allocatable GPU of the request's GPU
	// resource, holding TotalGPUs of it.
	Nodes, GPUNodes int
	TotalGPUs       int64
	// Offered is every GPU resource (jobspec.IsGPUResource) the nodes have, summed over them:
	// what a job that asks for one they lack could ask for instead.
	Offered corev1.ResourceList
	// SelectedNodes are the GPU nodes matching the selector; of those, Untolerated carry a taint
	// the pods do not tolerate (FirstTaint names one).
	SelectedNodes, Untolerated int
	FirstTaint                 string
	// MatchingNodes are the GPU nodes the pods could be scheduled on, holding MatchingGPUs.
	MatchingNodes int
	MatchingGPUs  int64
	// LargestNode is the most GPUs any matching node has.
	LargestNode int64
	// PodsThatFit is the sum over matching nodes of how many whole pods each can hold in every
	// resource asked for: a pod cannot span nodes, so this, not the plain sum, bounds the ranks.
	PodsThatFit int64
	// Bound counts matching nodes by the resource that limits how many pods they hold.
	Bound map[corev1.ResourceName]int
}

// Summarize counts what nodes can hold for r. Allocatable, not free: this answers "can it ever
// run", not "can it run now".
func Summarize(nodes []corev1.Node, r Request) Summary {
	return summarize(nodes, r, func(n *corev1.Node) corev1.ResourceList { return n.Status.Allocatable })
}

// SummarizeFree counts what nodes can hold for r now: each node's allocatable minus
// requested[node name] (see Requested), so it answers "can it start now".
func SummarizeFree(nodes []corev1.Node, requested map[string]corev1.ResourceList, r Request) Summary {
	return summarize(nodes, r, func(n *corev1.Node) corev1.ResourceList {
		return Free(n.Status.Allocatable, requested[n.Name])
	})
}

// summarize is Summarize over what avail says each node has.
func summarize(nodes []corev1.Node, r Request, avail func(*corev1.Node) corev1.ResourceList) Summary {
	s := Summary{Bound: map[corev1.ResourceName]int{}, Offered: corev1.ResourceList{}}
	gpu := r.GPUName()
	sel := r.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	for i := range nodes {
		n := &nodes[i]
		s.Nodes++
		have := avail(n)
		for name, q := range have {
			if jobspec.IsGPUResource(name) && q.Sign() > 0 {
				sum := s.Offered[name]
				sum.Add(q)
				s.Offered[name] = sum
			}
		}
		q := have[gpu]
		gpus := q.Value()
		if gpus <= 0 && r.GPUsPerPod() > 0 {
			continue
		}
		if gpus > 0 {
			s.GPUNodes++
			s.TotalGPUs += gpus
		}
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		s.SelectedNodes++
		if t := untolerated(n.Spec.Taints, r.Tolerations); t != nil {
			s.Untolerated++
			if s.FirstTaint == "" {
				s.FirstTaint = t.ToString()
			}
			continue
		}
		s.MatchingNodes++
		s.MatchingGPUs += gpus
		s.LargestNode = max(s.LargestNode, gpus)
		fits, bound := podsOn(have, r.PerPod, gpu)
		if bound != "" {
			s.Bound[bound]++
		}
		s.PodsThatFit += fits
	}
	return s
}

// Tolerates reports whether tols tolerate taint, by the scheduler's own rule
// (corev1.Toleration.ToleratesTaint, comparison operators included): the one toleration
// semantics of the plugin, shared by the fit check and triage's taint suggestions.
func Tolerates(tols []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(klog.Background(), taint, true) {
			return true
		}
	}
	return false
}

// untolerated returns the first taint that keeps a pod off the node, if any. PreferNoSchedule
// only steers the scheduler, so it never does.
func untolerated(taints []corev1.Taint, tols []corev1.Toleration) *corev1.Taint {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !Tolerates(tols, t) {
			return t
		}
	}
	return nil
}

// podsOn is how many pods needing perPod fit in allocatable, and the resource that bounds it;
// gpu is the request's GPU resource.
func podsOn(allocatable, perPod corev1.ResourceList, gpu corev1.ResourceName) (int64, corev1.ResourceName) {
	fits, bound := int64(-1), corev1.ResourceName("")
	names := make([]string, 0, len(perPod))
	for name := range perPod {
		names = append(names, string(name))
	}
	// GPUs first, so that a tie names the GPU: the others are only news when tighter.
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == string(gpu)) != (names[j] == string(gpu)) {
			return names[i] == string(gpu)
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		need := perPod[corev1.ResourceName(name)]
		if need.IsZero() {
			continue
		}
		have := allocatable[corev1.ResourceName(name)]
		n := have.MilliValue() / need.MilliValue()
		if fits < 0 || n < fits {
			fits, bound = n, corev1.ResourceName(name)
		}
	}
	if fits < 0 {
		return 0, ""
	}
	return fits, bound
}

// Check explains why r can never run on nodes summarized by s, or returns nil when it can.
func Check(s Summary, r Request) error {
	gpus, gpu := r.GPUsPerPod(), r.GPUName()
	if gpus <= 0 {
		return nil
	}
	if s.TotalGPUs == 0 && len(s.Offered) == 0 {
		return ErrNoGPUs
	}
	if s.TotalGPUs == 0 {
		return fmt.Errorf("no node of the cluster advertises %s; the GPU resources it has are %s: name one with --gpu-resource (see docs/gpus.md)",
			gpu, offered(s.Offered))
	}
	if s.PodsThatFit >= r.Pods {
		return nil
	}
	need := gpus * r.Pods
	where := "the cluster"
	if r.Selector != nil && !r.Selector.Empty() {
		if s.SelectedNodes == 0 {
			return fmt.Errorf("no node with %s matches --node-selector %s (the cluster has %s with %s in all)",
				gpu, r.Selector, plural.N(s.GPUNodes, "GPU node"), amount(s.TotalGPUs, gpu))
		}
		where = fmt.Sprintf("the nodes matching --node-selector %s", r.Selector)
	}
	if s.MatchingNodes == 0 && s.Untolerated > 0 {
		return fmt.Errorf("all %d GPU nodes of %s carry taints the pods do not tolerate (for example %s): add --toleration KEY[=VALUE]:EFFECT",
			s.Untolerated, where, s.FirstTaint)
	}
	if s.Untolerated > 0 {
		where += fmt.Sprintf(" (leaving out %s with untolerated taints such as %s)", plural.N(s.Untolerated, "node"), s.FirstTaint)
	}
	if s.MatchingGPUs < need {
		return fmt.Errorf("the job needs %d %s (%d per node x %s) but only %d %s allocatable on %s",
			need, gpu, gpus, plural.N(r.Pods, "node"), s.MatchingGPUs, plural.Word(s.MatchingGPUs, "is", "are"), where)
	}
	msg := fmt.Sprintf("the job needs %s of %d %s each, but a rank cannot span nodes and %s can hold only %d such %s "+
		"(%s in all, at most %d on one node)", plural.N(r.Pods, "rank"), gpus, gpu, where, s.PodsThatFit, plural.Word(s.PodsThatFit, "rank", "ranks"),
		amount(s.MatchingGPUs, gpu), s.LargestNode)
	var limits []string
	for name, n := range s.Bound {
		if name != gpu {
			limits = append(limits, fmt.Sprintf("on %s the %s a rank asks for is the limit (%s)", plural.N(n, "node"), name, flagFor(name)))
		}
	}
	sort.Strings(limits)
	if len(limits) > 0 {
		msg += ": " + strings.Join(limits, "; ")
	} else {
		msg += ": lower --gpus and raise --nodes"
	}
	return errors.New(msg)
}

// amount words n of the GPU resource gpu: "16 GPUs" for whole GPUs, else "14
// nvidia.com/mig-1g.10gb" (a slice or a shared GPU is no GPU of its own).
func amount(n int64, gpu corev1.ResourceName) string {
	if gpu == jobspec.GPUResource {
		return plural.N(n, "GPU")
	}
	return fmt.Sprintf("%d %s", n, Unit(gpu))
}

// Unit names what the GPU resource gpu counts, after a number: "GPUs" for whole GPUs, else
// the resource itself (a MIG slice or a shared GPU is no GPU of its own).
func Unit(gpu corev1.ResourceName) string {
	if gpu == jobspec.GPUResource {
		return "GPUs"
	}
	return string(gpu)
}

// offered lists GPU resources with their amounts, by name: "nvidia.com/gpu (16),
// nvidia.com/mig-1g.10gb (14)".
func offered(list corev1.ResourceList) string {
	names := make([]string, 0, len(list))
	for name := range list {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for i, name := range names {
		q := list[corev1.ResourceName(name)]
		names[i] = fmt.Sprintf("%s (%s)", name, q.String())
	}
	return strings.Join(names, ", ")
}

// flagFor names the submit flag that sets a resource's request.
func flagFor(name corev1.ResourceName) string {
	switch name {
	case corev1.ResourceCPU:
		return "lower --cpu"
	case corev1.ResourceMemory:
		return "lower --memory or --shm-size"
	}
	return "lower --resource " + string(name)
}

// Free is allocatable minus requested, never below zero, for every resource allocatable names.
func Free(allocatable, requested corev1.ResourceList) corev1.ResourceList {
	if len(requested) == 0 {
		return allocatable
	}
	free := make(corev1.ResourceList, len(allocatable))
	for name, q := range allocatable {
		q = q.DeepCopy()
		if used, ok := requested[name]; ok {
			q.Sub(used)
			if q.Sign() < 0 {
				q.Set(0)
			}
		}
		free[name] = q
	}
	return free
}

// Requested sums, per node name, what the pods bound to a node request, as the scheduler counts
// it: the larger of the containers' sum and any one init container, plus the pod overhead.
// Pods not yet bound hold nothing, and pods that ended (Succeeded, Failed) hold nothing any more.
func Requested(pods []corev1.Pod) map[string]corev1.ResourceList {
	out := map[string]corev1.ResourceList{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		sum := out[p.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			out[p.Spec.NodeName] = sum
		}
		addList(sum, PodRequests(p))
	}
	return out
}

// PodRequests is what one pod requests of its node. A container's request defaults to its
// limit, as the API server defaults it, so pods built by hand count the same as stored ones.
func PodRequests(p *corev1.Pod) corev1.ResourceList {
	total := corev1.ResourceList{}
	for i := range p.Spec.Containers {
		addList(total, containerRequests(&p.Spec.Containers[i]))
	}
	// Sidecars (restartable init containers) run alongside the containers; the others run one
	// at a time before them, so only the largest of those matters.
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		req := containerRequests(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addList(total, req)
			continue
		}
		for name, q := range req {
			if cur, ok := total[name]; !ok || cur.Cmp(q) < 0 {
				total[name] = q.DeepCopy()
			}
		}
	}
	addList(total, p.Spec.Overhead)
	return total
}

func containerRequests(c *corev1.Container) corev1.ResourceList {
	out := c.Resources.Requests.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range c.Resources.Limits {
		if _, ok := out[name]; !ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

func addList(into, add corev1.ResourceList) {
	for name, q := range add {
		cur := into[name]
		cur.Add(q)
		into[name] = cur
	}
}
