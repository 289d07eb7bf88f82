package triage

// The scheduler's side of triage: reading its "0/N nodes are available: ..." messages, the
// finding for a pod it cannot place, and the --toleration flags that would let it.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// schedulerMessage is the scheduler's "0/N nodes are available: ..." message, parsed.
type schedulerMessage struct {
	total int
	// reasons maps each filter's reason ("Insufficient nvidia.com/gpu") to its node count.
	reasons map[string]int
}

var availableRE = regexp.MustCompile(`^0/(\d+) nodes are available(?:: (.*))?`)

// parseScheduler reads the filter part of a FailedScheduling message and ignores what follows
// "preemption:", which repeats the nodes from the preemption plugin's point of view.
func parseScheduler(msg string) (schedulerMessage, bool) {
	m := availableRE.FindStringSubmatch(msg)
	if m == nil {
		return schedulerMessage{}, false
	}
	total, _ := strconv.Atoi(m[1])
	out := schedulerMessage{total: total, reasons: map[string]int{}}
	body := m[2]
	if i := strings.Index(body, " preemption:"); i >= 0 {
		body = body[:i]
	}
	body = strings.TrimSuffix(strings.TrimSpace(body), ".")
	for _, part := range strings.Split(body, ", ") {
		n, reason, ok := strings.Cut(strings.TrimSpace(part), " ")
		if c, err := strconv.Atoi(n); ok && err == nil {
			out.reasons[strings.TrimSuffix(reason, ".")] += c
		} else if part != "" {
			// Messages without a count ("pod has unbound immediate PersistentVolumeClaims").
			out.reasons[strings.TrimSuffix(part, ".")] += total
		}
	}
	return out, true
}

// everyNode reports whether the reasons (substrings) together rule out all nodes.
func (s schedulerMessage) everyNode(reasons ...string) bool {
	n := 0
	for r, c := range s.reasons {
		for _, reason := range reasons {
			if strings.Contains(r, reason) {
				n += c
				break
			}
		}
	}
	return s.total > 0 && n >= s.total
}

// has reports whether any node was ruled out for reason (a substring).
func (s schedulerMessage) has(reason string) bool {
	for r := range s.reasons {
		if strings.Contains(r, reason) {
			return true
		}
	}
	return false
}

// unscheduled explains a pod the scheduler has not placed, in the scheduler's own words.
func (v podView) unscheduled() *finding {
	pod := v.pod
	if pod.Spec.NodeName != "" {
		return nil
	}
	c := podCondition(pod, corev1.PodScheduled)
	if c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonSchedulingGated {
		return &finding{name: corev1.PodReasonSchedulingGated, message: jobstatus.ReasonMessage("the pod has scheduling gates", gates(pod)),
			class: ErrInfra, at: c.LastTransitionTime.Time,
			suggestion: "The pod waits for its scheduling gates to be removed (a queue such as Kueue admits it when there is room)."}
	}
	var msg string
	var at time.Time
	if c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		msg, at = c.Message, c.LastTransitionTime.Time
	}
	if e := v.latest("FailedScheduling"); e != nil && (msg == "" || eventTime(*e).After(at)) {
		msg, at = e.Message, eventTime(*e)
	}
	if msg == "" {
		return nil
	}
	f := &finding{name: corev1.PodReasonUnschedulable, message: msg, class: ErrInfra, at: at,
		suggestion: "The scheduler cannot place the pod; its message says which nodes were ruled out and why. " +
			"Check the pod's resources, node selector and tolerations against the nodes."}
	sm, ok := parseScheduler(msg)
	if !ok {
		return f
	}
	const noMatch, tainted = "didn't match Pod's node affinity/selector", "untolerated taint"
	switch {
	// The scheduler names one reason per node: a tainted node that the selector would not match
	// either is counted as tainted. When the selector rules out the rest and matches none of the
	// tainted nodes, the selector is what to fix, not a toleration.
	case sm.everyNode(noMatch) ||
		(sm.has(noMatch) && sm.everyNode(noMatch, tainted) && !selectsAny(pod.Spec.NodeSelector, v.s.TaintedNodes)):
		f.name = "NoMatchingNode"
		sel := selectorText(pod.Spec.NodeSelector)
		f.message = fmt.Sprintf("no node matches the node selector %s: %s", sel, msg)
		f.suggestion = fmt.Sprintf("No node has the labels %s. Check them with `kubectl get nodes -l %s` and fix "+
			"--node-selector.", sel, sel)
		if sel == "" {
			f.message = "no node matches the pod's node affinity: " + msg
			f.suggestion = "No node satisfies the pod's node affinity: check it against `kubectl get nodes --show-labels`."
		}
	case sm.has("unbound immediate PersistentVolumeClaims") || sm.has("unbound PersistentVolumeClaims"):
		f.name = "PersistentVolumeClaimNotBound"
		claims := podClaims(pod)
		f.suggestion = fmt.Sprintf("A PersistentVolumeClaim of the pod (%s) is not bound to a volume, so the pod cannot "+
			"be placed. Check `kubectl get pvc %s -n %s`: a Pending claim needs a StorageClass that can provision it "+
			"(`kubectl describe pvc` says why it waits) or a matching PersistentVolume; a claim that does not exist "+
			"must be created before the job (--volume mounts existing claims only).",
			strings.Join(claims, ", "), strings.Join(claims, " "), pod.Namespace)
	case sm.has("Insufficient " + string(podGPU(pod))):
		f.suggestion = fmt.Sprintf("No node has %s free %s for this rank. Wait for running jobs to finish, ask for "+
			"fewer GPUs per node (--gpus) over more nodes (--nodes), or add GPU nodes. `kubectl tao submit` checks "+
			"total capacity unless --no-capacity-check is given.", gpuRequest(pod), podGPU(pod))
	case sm.has(tainted):
		f.name = "UntoleratedTaint"
		f.suggestion = taintSuggestion(msg, pod, v.s.TaintedNodes)
	case sm.has("Insufficient"):
		f.suggestion = "No node has enough free CPU or memory for the pod's requests. Lower the requests or wait for room."
	}
	return f
}

// podGPU is the GPU resource the pod asks for: whole GPUs, else the first other GPU resource
// (jobspec.IsGPUResource: MIG slices, shared GPUs) by name in its containers' limits or
// requests. The pod has no annotation to say it (the Job does), and its limits do. Whole GPUs
// when it asks for none.
func podGPU(pod *corev1.Pod) corev1.ResourceName {
	var other corev1.ResourceName
	for _, c := range pod.Spec.Containers {
		for _, list := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
			for name := range list {
				if name == jobspec.GPUResource {
					return name
				}
				if jobspec.IsGPUResource(name) && (other == "" || name < other) {
					other = name
				}
			}
		}
	}
	if other == "" {
		return jobspec.GPUResource
	}
	return other
}

// gpuCount is the GPUs (of podGPU) the pod's containers ask for (limit, else request).
func gpuCount(pod *corev1.Pod) int64 {
	gpu := podGPU(pod)
	var n int64
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[gpu]; ok {
			n += q.Value()
		} else if q, ok := c.Resources.Requests[gpu]; ok {
			n += q.Value()
		}
	}
	return n
}

// gpuRequest is gpuCount for a sentence: "No node has N free GPUs", or "enough" when the pod
// asks for none.
func gpuRequest(pod *corev1.Pod) string {
	if n := gpuCount(pod); n > 0 {
		return strconv.FormatInt(n, 10)
	}
	return "enough"
}

func selectorText(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

func gates(pod *corev1.Pod) string {
	var g []string
	for _, s := range pod.Spec.SchedulingGates {
		g = append(g, s.Name)
	}
	return strings.Join(g, ", ")
}

// taintRE reads the scheduler's "had untolerated taint {KEY: VALUE}" (VALUE may be empty).
var taintRE = regexp.MustCompile(`untolerated taint\(?s?\)? ?\{([^:}]+): ?([^}]*)\}`)

// taintSuggestion turns the taints that keep the pod off its nodes into the --toleration flags
// that would tolerate them. Older schedulers name the taint in the message ("{KEY: VALUE}",
// without its effect); newer ones only say "untolerated taint(s)", and the taints come from
// the nodes the pod is meant for (matching its node selector, with GPUs if it asks for them).
func taintSuggestion(msg string, pod *corev1.Pod, nodes []corev1.Node) string {
	taints := untoleratedTaints(pod, nodes)
	effectKnown := len(taints) > 0
	if !effectKnown {
		for _, m := range taintRE.FindAllStringSubmatch(msg, -1) {
			taints = appendNew(taints, corev1.Taint{Key: strings.TrimSpace(m[1]), Value: strings.TrimSpace(m[2]), Effect: corev1.TaintEffectNoSchedule})
		}
	}
	flags := make([]string, len(taints))
	gpuTaint := false
	for i, t := range taints {
		flags[i] = tolerationFlag(t)
		gpuTaint = gpuTaint || t.Key == string(jobspec.GPUResource)
	}
	see := "`kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints`"
	if len(flags) == 0 {
		return "The nodes carry taints the pod does not tolerate. See them with " + see + " and resubmit with " +
			"--toleration KEY[=VALUE]:EFFECT, if the nodes are meant for this job (ask the cluster admin)."
	}
	s := "The nodes carry taints the pod does not tolerate. If those nodes are meant for this job, resubmit with " +
		strings.Join(flags, " ")
	if effectKnown {
		s += "."
	} else {
		s += " (use the taint's own effect, NoSchedule or NoExecute: " + see + ")."
	}
	if gpuTaint {
		s += " kubectl tao adds the " + string(jobspec.GPUResource) + " toleration itself to pods that ask for GPUs, unless --no-gpu-toleration is given."
	}
	return s
}

// tolerationFlag is the --toleration flag that tolerates t.
func tolerationFlag(t corev1.Taint) string {
	f := "--toleration " + t.Key
	if t.Value != "" {
		f += "=" + t.Value
	}
	return f + ":" + string(t.Effect)
}

// appendNew appends t to taints unless a taint with its key, value and effect is there.
func appendNew(taints []corev1.Taint, t corev1.Taint) []corev1.Taint {
	for _, o := range taints {
		if o.Key == t.Key && o.Value == t.Value && o.Effect == t.Effect {
			return taints
		}
	}
	return append(taints, t)
}

// untoleratedTaints are the taints, on the nodes the pod is meant for, that it does not
// tolerate (by the scheduler's rule, gpufit.Tolerates), in node and taint order without repeats.
func untoleratedTaints(pod *corev1.Pod, nodes []corev1.Node) []corev1.Taint {
	gpu, wantsGPU := podGPU(pod), gpuCount(pod) > 0
	var out []corev1.Taint
	for i := range nodes {
		n := &nodes[i]
		if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
			continue
		}
		if q, ok := n.Status.Allocatable[gpu]; wantsGPU && (!ok || q.IsZero()) {
			continue
		}
		for j := range n.Spec.Taints {
			t := &n.Spec.Taints[j]
			if t.Effect == corev1.TaintEffectPreferNoSchedule || gpufit.Tolerates(pod.Spec.Tolerations, t) {
				continue
			}
			out = appendNew(out, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	return out
}

// selectsAny reports whether a node selector matches any of nodes (false for no selector).
func selectsAny(selector map[string]string, nodes []corev1.Node) bool {
	if len(selector) == 0 {
		return false
	}
	sel := labels.SelectorFromSet(selector)
	for i := range nodes {
		if sel.Matches(labels.Set(nodes[i].Labels)) {
			return true
		}
	}
	return false
}
