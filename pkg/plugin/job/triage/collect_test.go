package triage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func requests(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		r := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			r += "/" + a.GetSubresource()
		}
		out = append(out, r)
	}
	// The Job's get and its pods' list go out together (one round trip): either may come first.
	if len(out) >= 2 && out[0] == "list pods" && out[1] == "get jobs" {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// TestCollectA256PodJobInSixRequests is the issue's budget: the worst case reads the Job, its
// pods, the events, the nodes and one rank's logs, whatever the number of pods.
func TestCollectA256PodJobInSixRequests(t *testing.T) {
	const ranks = 256
	job := testJob("big", ranks, failedCond("BackoffLimitExceeded", "Job has reached the specified backoff limit", t0.Add(time.Hour)))
	objs := []runtime.Object{job}
	for r := 0; r < ranks; r++ {
		n := fmt.Sprintf("gpu-node-%d", r)
		var p corev1.Pod
		switch {
		case r == 7:
			p = podOf("big", r).Node(n).Exited(1, "Error", t0.Add(time.Minute)).Val()
		case r%2 == 0:
			// Half the ranks were evicted: each needs its node's conditions.
			p = podOf("big", r).Node(n).Val()
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
		default:
			p = podOf("big", r).Node(n).Exited(143, "Error", t0.Add(2*time.Minute)).Val()
		}
		objs = append(objs, &p, fixture.Node(n).Ready(corev1.ConditionTrue, "", t0.Add(2*time.Minute)).Obj())
		ev := fixture.PodEvent(&p, "BackOff", "noise").Last(t0.Add(time.Second)).Val()
		objs = append(objs, &ev)
	}
	c := fake.NewClientset(objs...)
	s, warnings, err := Collect(context.Background(), c, "ml", "big", CollectOptions{Logs: true, Now: now})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Collect: %v, warnings %q", err, warnings)
	}
	got := requests(c)
	if len(got) > 6 {
		t.Fatalf("%d requests, want at most 6: %v", len(got), got)
	}
	if want := "get jobs,list pods,list events,list nodes,get pods/log"; strings.Join(got, ",") != want {
		t.Errorf("requests = %v, want %s", got, want)
	}
	if len(s.Pods) != ranks || len(s.Events) != ranks || len(s.Nodes) != ranks/2 || len(s.Logs["big-7-abcde"]) == 0 {
		t.Errorf("snapshot: %d pods, %d events, %d nodes, logs %v", len(s.Pods), len(s.Events), len(s.Nodes), s.Logs)
	}
	a := Analyze(s)
	if len(a.JobFailureByNodeEvent) != ranks {
		t.Errorf("%d findings for %d failed ranks", len(a.JobFailureByNodeEvent), ranks)
	}
}

func TestCollectHealthyJobReadsNoNodesOrLogs(t *testing.T) {
	job := testJob("ok", 2)
	p0, p1 := podOf("ok", 0).Node("a").Running(t0.Add(time.Minute)).Val(), podOf("ok", 1).Node("b").Running(t0.Add(time.Minute)).Val()
	stranger := podOf("other", 0).Node("c").Running(t0.Add(time.Minute)).Val()
	c := fake.NewClientset(job, &p0, &p1, &stranger)
	s, _, err := Collect(context.Background(), c, "ml", "ok", CollectOptions{Logs: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(requests(c), ","); got != "get jobs,list pods,list events" {
		t.Errorf("requests = %s", got)
	}
	if len(s.Pods) != 2 {
		t.Errorf("pods = %d, want the Job's 2 (selected by its controller UID)", len(s.Pods))
	}
	for _, a := range c.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "events" &&
			l.GetListRestrictions().Fields.String() != "type=Warning" {
			t.Errorf("events listed with field selector %q, want type=Warning", l.GetListRestrictions().Fields)
		}
	}
}

func TestCollectFewNodesAreReadOneByOne(t *testing.T) {
	job := testJob("t", 2)
	p0 := podOf("t", 0).Node("gpu-node-1").Running(t0.Add(time.Minute)).NotReady().Val()
	p1 := podOf("t", 1).Node("gpu-node-1").Running(t0.Add(time.Minute)).NotReady().Val()
	c := fake.NewClientset(job, &p0, &p1, fixture.Node("gpu-node-1").Ready(corev1.ConditionFalse, "PLEG is not healthy", t0.Add(2*time.Minute)).Obj())
	s, _, err := Collect(context.Background(), c, "ml", "t", CollectOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(requests(c), ","); got != "get jobs,list pods,list events,get nodes" {
		t.Errorf("requests = %s, want one get for the one node", got)
	}
	reps, _ := Replicas(s)
	if reps[0].Status.ReadinessIssue == nil || reps[0].Status.ReadinessIssue.Reason != "NodeNotReady" {
		t.Errorf("replica 0 = %+v", reps[0])
	}
}

func TestCollectNotFoundAndDegradedReads(t *testing.T) {
	c := fake.NewClientset()
	_, _, err := Collect(context.Background(), c, "ml", "nope", CollectOptions{})
	if exitcode.Of(err) != exitcode.NotFound || !strings.Contains(err.Error(), `job "nope" not found in namespace "ml"`) {
		t.Errorf("err = %v (exit %d)", err, exitcode.Of(err))
	}

	job := testJob("t", 1)
	p := podOf("t", 0).Node("gpu-node-1").Running(t0.Add(time.Minute)).NotReady().Val()
	c = fake.NewClientset(job, &p)
	forbid := func(res string) {
		c.PrependReactor("*", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: res}, "", fmt.Errorf("RBAC"))
		})
	}
	forbid("events")
	forbid("nodes")
	s, warnings, err := Collect(context.Background(), c, "ml", "t", CollectOptions{Now: now})
	if err != nil || len(s.Pods) != 1 {
		t.Fatalf("Collect = %v, %d pods; want an answer without events and nodes", err, len(s.Pods))
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "events") || !strings.Contains(warnings[1], "nodes") {
		t.Errorf("warnings = %q", warnings)
	}
}

// A pod kept off every node by a taint costs one node list, and only the tainted nodes are kept.
func TestCollectReadsTaintsOnlyForATaintedRefusal(t *testing.T) {
	job := testJob("t", 1)
	p := podOf("t", 0).Unschedulable("0/2 nodes are available: 2 node(s) had untolerated taint(s).", t0.Add(time.Second)).Val()
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0", Labels: map[string]string{"pool": "a"}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{jobspec.GPUResource: resource.MustParse("8")}}}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}
	c := fake.NewClientset(job, &p, tainted, plain)
	s, warnings, err := Collect(context.Background(), c, "ml", "t", CollectOptions{Now: now})
	if err != nil || len(warnings) != 0 {
		t.Fatal(err, warnings)
	}
	if got := strings.Join(requests(c), ","); got != "get jobs,list pods,list events,list nodes" {
		t.Errorf("requests = %s", got)
	}
	if len(s.TaintedNodes) != 1 || s.TaintedNodes[0].Name != "gpu-0" || s.TaintedNodes[0].Labels["pool"] != "a" {
		t.Errorf("tainted nodes = %+v", s.TaintedNodes)
	}
	a := Analyze(s)
	if a.FirstFailure == nil || !strings.Contains(a.Suggestion, "--toleration dedicated=ml:NoSchedule") {
		t.Errorf("diagnose: %+v", a)
	}
}
