package triage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// The knobs of collection.
const (
	pageSize = 500
	// LogTail is how many of the failing rank's last log lines are read.
	LogTail = 50
	// maxNodeGets is how many nodes are read one by one; beyond it one list is cheaper.
	maxNodeGets = 3
)

// CollectOptions say how much to read beyond the Job, its pods and their events.
type CollectOptions struct {
	// Logs reads the failing rank's last lines (diagnose needs them; replicas does not).
	Logs bool
	Now  time.Time
}

// Collect reads what the analysis needs, in a bounded number of requests: the Job (1 get), its
// pods (1 list per 500), the namespace's Warning events (1 list per 500), the nodes of pods
// that are not progressing (a get each for up to 3 nodes, else 1 list), the nodes' taints
// (1 list per 500 nodes, only when a pod is unschedulable for an untolerated taint), and the
// failing rank's last log lines (1 get). Reads that only add detail (events, nodes, logs) degrade to a warning
// when they fail, so a user who may not list nodes still gets an answer.
func Collect(ctx context.Context, c kubernetes.Interface, ns, name string, o CollectOptions) (Snapshot, []string, error) {
	s := Snapshot{Now: o.Now, Nodes: map[string]*corev1.Node{}, Logs: map[string][]string{}}
	var warnings []string
	// The Job and its pods are read together (one round trip).
	job, pods, err := jobpods.Fetch(ctx, c, ns, name)
	s.Job = job
	switch {
	case job == nil && apierrors.IsNotFound(err):
		return s, nil, fmt.Errorf("job %q not found in namespace %q: %w", name, ns, err)
	case job == nil && err != nil:
		return s, nil, fmt.Errorf("reading job %s: %w", name, err)
	case err != nil:
		return s, nil, fmt.Errorf("listing the pods of job %s: %w", name, err)
	}
	s.Pods = pods

	events, err := listEvents(ctx, c, ns)
	if err != nil {
		warnings = append(warnings, fmt.Sprintf("could not read events in namespace %s (%v): scheduling and image-pull details may be missing", ns, err))
	}
	s.Events = relevantEvents(job, s.Pods, events)

	if err := readNodes(ctx, c, &s); err != nil {
		warnings = append(warnings, fmt.Sprintf("could not read nodes (%v): node health is not checked", err))
	}
	if NeedsTaints(s.Pods, s.Events) {
		if s.TaintedNodes, err = taintedNodes(ctx, c); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not list nodes (%v): the untolerated taint is not named", err))
		}
	}
	if o.Logs {
		if pod := NeedsLogs(s.Pods); pod != "" {
			lines, err := tailLogs(ctx, c, s.Pods, pod)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("could not read the logs of pod %s (%v)", pod, err))
			} else {
				s.Logs[pod] = lines
			}
		}
	}
	return s, warnings, nil
}

// listEvents reads the namespace's Warning events: every event a rule looks at is a Warning
// (FailedScheduling, Failed, BackOff, FailedMount, FailedCreate, ...), and Normal ones
// (Scheduled, Pulled, Started) are most of the volume.
func listEvents(ctx context.Context, c kubernetes.Interface, ns string) ([]corev1.Event, error) {
	var out []corev1.Event
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", corev1.EventTypeWarning).String(),
		Limit:         pageSize,
	}
	// What was read before an error is kept: the caller warns and analyses it.
	_, err := pages.Each(ctx, opts, c.CoreV1().Events(ns).List, func(l *corev1.EventList) { out = append(out, l.Items...) })
	return out, err
}

// relevantEvents keeps the events about the Job and its pods.
func relevantEvents(job *batchv1.Job, pods []corev1.Pod, events []corev1.Event) []corev1.Event {
	uids := map[string]bool{string(job.UID): true}
	names := map[string]bool{}
	for i := range pods {
		uids[string(pods[i].UID)] = true
		names[pods[i].Name] = true
	}
	var out []corev1.Event
	for _, e := range events {
		io := e.InvolvedObject
		switch {
		case io.UID != "" && uids[string(io.UID)]:
		case io.UID == "" && io.Kind == "Pod" && names[io.Name]:
		case io.UID == "" && io.Kind == "Job" && io.Name == job.Name:
		case isWorkloadOf(job, io):
		default:
			continue
		}
		out = append(out, e)
	}
	return out
}

func readNodes(ctx context.Context, c kubernetes.Interface, s *Snapshot) error {
	want := map[string]bool{}
	for i := range s.Pods {
		if NeedsNode(&s.Pods[i]) {
			want[s.Pods[i].Spec.NodeName] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	if len(want) <= maxNodeGets {
		names := make([]string, 0, len(want))
		for n := range want {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			node, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			s.Nodes[n] = node
		}
		return nil
	}
	_, err := pages.Each(ctx, metav1.ListOptions{Limit: pageSize}, c.CoreV1().Nodes().List, func(l *corev1.NodeList) {
		for i := range l.Items {
			if want[l.Items[i].Name] {
				s.Nodes[l.Items[i].Name] = &l.Items[i]
			}
		}
	})
	return err
}

func tailLogs(ctx context.Context, c kubernetes.Interface, pods []corev1.Pod, name string) ([]string, error) {
	var pod *corev1.Pod
	for i := range pods {
		if pods[i].Name == name {
			pod = &pods[i]
		}
	}
	container := ""
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && container == "" {
				container = cs.Name
			}
		}
	}
	tail := int64(LogTail)
	raw, err := c.CoreV1().Pods(pod.Namespace).GetLogs(name, &corev1.PodLogOptions{Container: container, TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// NeedsTaints reports whether a pod is unschedulable because of an untolerated taint, the one
// case where the nodes' taints must be read to say which toleration would help.
func NeedsTaints(pods []corev1.Pod, events []corev1.Event) bool {
	const reason = "untolerated taint"
	unscheduled := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" {
			continue
		}
		unscheduled[p.Name] = true
		if c := podCondition(p, corev1.PodScheduled); c != nil && strings.Contains(c.Message, reason) {
			return true
		}
	}
	for _, e := range events {
		if e.Reason == "FailedScheduling" && unscheduled[e.InvolvedObject.Name] && strings.Contains(e.Message, reason) {
			return true
		}
	}
	return false
}

// taintedNodes lists the nodes, a page at a time, keeping only what the taint rule reads of the
// tainted ones.
func taintedNodes(ctx context.Context, c kubernetes.Interface) ([]corev1.Node, error) {
	var out []corev1.Node
	_, err := pages.Each(ctx, metav1.ListOptions{Limit: pageSize}, c.CoreV1().Nodes().List, func(l *corev1.NodeList) {
		for _, n := range l.Items {
			if len(n.Spec.Taints) == 0 {
				continue
			}
			out = append(out, corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels},
				Spec:       corev1.NodeSpec{Taints: n.Spec.Taints},
				Status:     corev1.NodeStatus{Allocatable: n.Status.Allocatable},
			})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
