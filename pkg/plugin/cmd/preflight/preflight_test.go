package preflight_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/preflightcheck"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// newClient answers every SelfSubjectAccessReview with allowed unless deny says otherwise.
func newClient(deny func(*authv1.ResourceAttributes) bool, objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"}
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = deny == nil || !deny(r.Spec.ResourceAttributes)
		return true, r, nil
	})
	return c
}

func run(c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ml", Client: c}.Run(context.Background(), append([]string{"preflight"}, args...)...)
}

func cluster() []runtime.Object {
	return []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, fixture.Node("a").Label(preflightcheck.LabelDriverMajor, "580").Label(preflightcheck.LabelCUDAMajor, "13").Label(preflightcheck.LabelCUDAMinor, "0").GPUs(8).Allocatable(corev1.ResourceMemory, "1Ti").Obj(), fixture.Node("b").Label(preflightcheck.LabelDriverMajor, "580").Label(preflightcheck.LabelCUDAMajor, "13").Label(preflightcheck.LabelCUDAMinor, "0").GPUs(8).Allocatable(corev1.ResourceMemory, "1Ti").Obj()}
}

func TestPreflightJSON(t *testing.T) {
	c := newClient(nil, cluster()...)
	r := run(c, "--gpus", "8", "--nodes", "2", "-o", "json")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("exit %d, stderr %q, stdout %s", r.Code, r.Stderr, r.Stdout)
	}
	var checks []map[string]string
	if err := json.Unmarshal([]byte(r.Stdout), &checks); err != nil {
		t.Fatalf("stdout is not a JSON list: %v\n%s", err, r.Stdout)
	}
	got := map[string]string{}
	for _, ch := range checks {
		if len(ch) != 4 {
			t.Errorf("check %v: want exactly name, result, message, fix", ch)
		}
		got[ch["name"]] = ch["result"]
	}
	want := map[string]string{"cluster": "PASS", "namespace": "PASS", "permissions": "PASS", "cluster-reads": "PASS", "gpus": "PASS",
		"gpu-operator": "WARN", "gpu-metrics": "WARN", "node-runtime": "PASS", "container-toolkit": "INFO", "multi-node": "PASS", "fit": "PASS",
		"queue": ""} // no Kueue, no --queue: no queue line
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	// One list each for nodes, pods and daemonsets, two pod lists looking for dcgm-exporter; one
	// review per permission; Kueue's discovery (v1beta2, then v1beta1: not installed); nothing
	// written.
	counts := map[string]int{}
	for _, a := range c.Actions() {
		counts[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	if counts["list nodes"] != 1 || counts["list pods"] != 3 || counts["list daemonsets"] != 1 || counts["get namespaces"] != 1 ||
		counts["create selfsubjectaccessreviews"] < 15 || counts["get resource"] != 2 || len(counts) != 7 {
		t.Fatalf("API requests: %v", counts)
	}
}

func TestPreflightFailsWithNumbers(t *testing.T) {
	r := run(newClient(nil, cluster()...), "--gpus", "8", "--nodes", "3")
	if r.Code != int(exitcode.PreflightFailed) {
		t.Fatalf("exit %d, want %d\n%s%s", r.Code, exitcode.PreflightFailed, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "needs 24 nvidia.com/gpu (8 per node x 3 nodes) but only 16 are allocatable") ||
		!strings.HasPrefix(r.Stdout, "CHECK ") || r.Stderr != "error: preflight failed: fit\n" {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	}
}

func TestPreflightFreeNow(t *testing.T) {
	objs := append(cluster(), fixture.Pod("busy").Namespace("other").Node("a").Container(fixture.GPUContainer("c", 4)).Phase(corev1.PodRunning).Obj())
	if r := run(newClient(nil, objs...), "--gpus", "8", "--nodes", "2"); r.Code != 0 || !strings.Contains(r.Stdout, "fits when others finish") {
		t.Fatalf("without --now: exit %d\n%s", r.Code, r.Stdout)
	}
	if r := run(newClient(nil, objs...), "--gpus", "8", "--nodes", "2", "--now"); r.Code != int(exitcode.PreflightFailed) || !strings.Contains(r.Stdout, "does not fit now") {
		t.Fatalf("with --now: exit %d\n%s", r.Code, r.Stdout)
	}
}

func TestPreflightNamesDeniedVerbs(t *testing.T) {
	deny := func(a *authv1.ResourceAttributes) bool {
		return (a.Resource == "pods" && a.Subresource == "log") || a.Resource == "nodes"
	}
	c := newClient(deny, cluster()...)
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errForbidden
	})
	r := run(c)
	if r.Code != int(exitcode.PreflightFailed) || !strings.Contains(r.Stdout, "you may not: get pods/log (logs, top") ||
		!strings.Contains(r.Stdout, "list nodes") || strings.Contains(r.Stdout, "\nfit ") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stdout)
	}
}

func TestPreflightUnreachable(t *testing.T) {
	c := newClient(nil)
	c.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	})
	r := run(c, "-o", "json")
	if r.Code != int(exitcode.PreflightFailed) || !strings.Contains(r.Stdout, "Could not reach the Kubernetes API server") || len(c.Actions()) != 1 {
		t.Fatalf("exit %d, %d requests\n%s", r.Code, len(c.Actions()), r.Stdout)
	}
}

func TestPreflightUsage(t *testing.T) {
	for _, args := range [][]string{{"--nodes", "0"}, {"-o", "bogus"}, {"--toleration", "bad"}, {"extra"}} {
		if r := run(newClient(nil), args...); r.Code != int(exitcode.Usage) {
			t.Errorf("%v: exit %d, want usage\n%s", args, r.Code, r.Stderr)
		}
	}
}

var errForbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: denied"))

func TestPreflightQueue(t *testing.T) {
	withKueue := func() *fake.Clientset {
		c := newClient(nil, cluster()...)
		c.Resources = []*metav1.APIResourceList{{GroupVersion: "kueue.x-k8s.io/v1beta2",
			APIResources: []metav1.APIResource{{Name: "localqueues", Namespaced: true, Kind: "LocalQueue"}}}}
		return c
	}
	lq := &unstructured.Unstructured{}
	lq.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	lq.SetKind("LocalQueue")
	lq.SetNamespace("ml")
	lq.SetName("team-a")
	dyn := func() *fakedynamic.FakeDynamicClient {
		return fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}: "LocalQueueList"}, lq.DeepCopy(),
			cmdtest.KueueObject("LocalQueue", "ml", "orphan", map[string]any{"spec": map[string]any{"clusterQueue": "gone"}}))
	}
	tests := []struct {
		name   string
		client *fake.Clientset
		queue  string
		code   int
		want   string
	}{
		{"queue exists", withKueue(), "team-a", 0, "LocalQueue team-a exists in namespace ml"},
		{"queue missing", withKueue(), "team-b", int(exitcode.PreflightFailed), `no LocalQueue "team-b" in namespace ml (LocalQueues there: orphan, team-a)`},
		{"queue pointing at no ClusterQueue", withKueue(), "orphan", int(exitcode.PreflightFailed),
			"Kueue would never admit the job: LocalQueue orphan points at ClusterQueue gone, which does not exist"},
		{"Kueue not installed", newClient(nil, cluster()...), "team-a", int(exitcode.PreflightFailed), "Kueue is not installed"},
		{"no --queue lists the queues", withKueue(), "", 0, "LocalQueues in namespace ml: orphan, team-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := cmdtest.Cmd{NS: "ml", Client: tc.client, Dynamic: dyn()}.Run(context.Background(),
				"preflight", "--gpus", "8", "--queue", tc.queue)
			if r.Code != tc.code || !strings.Contains(r.Stdout, tc.want) {
				t.Fatalf("exit %d (want %d), stdout:\n%s\nstderr: %s", r.Code, tc.code, r.Stdout, r.Stderr)
			}
		})
	}
}
