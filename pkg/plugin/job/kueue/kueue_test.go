package kueue

import (
	"bytes"
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Served returns discovery resources as an API server with Kueue's CRDs in version v serves them.
func served(versions ...string) []*metav1.APIResourceList {
	var out []*metav1.APIResourceList
	for _, v := range versions {
		out = append(out, &metav1.APIResourceList{GroupVersion: Group + "/" + v, APIResources: []metav1.APIResource{
			{Name: "clusterqueues", Kind: "ClusterQueue"},
			{Name: LocalQueues, Namespaced: true, Kind: "LocalQueue"},
			{Name: "workloads", Namespaced: true, Kind: "Workload"},
		}})
	}
	return out
}

func localQueue(version, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(Group + "/" + version)
	u.SetKind("LocalQueue")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// queueWithQuota is LocalQueue team-a in ml pointing at ClusterQueue gpu-cq, which has gpus
// nvidia.com/gpu of nominal quota.
func queueWithQuota(gpus string) []runtime.Object {
	lq := localQueue("v1beta2", "ml", "team-a")
	_ = unstructured.SetNestedField(lq.Object, "gpu-cq", "spec", "clusterQueue")
	cq := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"resourceGroups": []any{map[string]any{
		"flavors": []any{map[string]any{"name": "h100", "resources": []any{map[string]any{"name": "nvidia.com/gpu", "nominalQuota": gpus}}}},
	}}}}}
	cq.SetAPIVersion(Group + "/v1beta2")
	cq.SetKind("ClusterQueue")
	cq.SetName("gpu-cq")
	return []runtime.Object{lq, cq}
}

// fakeDynamic serves LocalQueues and ClusterQueues in both versions.
func fakeDynamic(objs ...runtime.Object) *fakedynamic.FakeDynamicClient {
	kinds := map[schema.GroupVersionResource]string{}
	for _, v := range Versions {
		kinds[GVR(v)] = "LocalQueueList"
		kinds[gvr(v, ClusterQueuesResource)] = "ClusterQueueList"
	}
	return fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		want      string
	}{
		{"not installed", nil, ""},
		{"v0.17: both versions", served("v1beta1", "v1beta2"), "v1beta2"},
		{"older Kueue: v1beta1 only", served("v1beta1"), "v1beta1"},
		{"group without localqueues", []*metav1.APIResourceList{{GroupVersion: Group + "/v1beta2", APIResources: []metav1.APIResource{{Name: "workloads"}}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			c.Resources = tc.resources
			got, err := Discover(context.Background(), c.Discovery())
			if err != nil || got != tc.want {
				t.Fatalf("Discover() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	forbidden := func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: LocalQueues}, "team-a", nil)
	}
	tests := []struct {
		name        string
		resources   []*metav1.APIResourceList
		queues      []runtime.Object
		forbidGet   bool
		forbidCQ    bool
		forbidDisco bool
		gpus        int64
		wantErr     []string
		wantCode    exitcode.Code
		wantWarn    string
	}{
		{name: "queue exists", resources: served("v1beta1", "v1beta2"), queues: []runtime.Object{localQueue("v1beta2", "ml", "team-a")}},
		{name: "queue exists, v1beta1 only", resources: served("v1beta1"), queues: []runtime.Object{localQueue("v1beta1", "ml", "team-a")}},
		{name: "Kueue not installed", wantCode: exitcode.NotFound,
			wantErr: []string{"Kueue is not installed", "stay suspended forever", InstallDocs, "without --queue"}},
		{name: "queue missing, others listed", resources: served("v1beta2"), wantCode: exitcode.NotFound,
			queues:  []runtime.Object{localQueue("v1beta2", "ml", "team-b"), localQueue("v1beta2", "ml", "default"), localQueue("v1beta2", "other", "team-a")},
			wantErr: []string{`no LocalQueue "team-a" in namespace ml`, "LocalQueues there: default, team-b", "kubectl get localqueues -n ml"}},
		{name: "queue missing, none at all", resources: served("v1beta2"), wantCode: exitcode.NotFound,
			wantErr: []string{"LocalQueues there: none"}},
		{name: "may not read queues", resources: served("v1beta2"), forbidGet: true, wantWarn: "could not check that LocalQueue team-a exists"},
		{name: "may not discover", forbidDisco: true, wantWarn: "could not check that Kueue is installed"},
		{name: "quota holds the job", resources: served("v1beta2"), queues: queueWithQuota("16"), gpus: 16},
		{name: "quota can never hold the job", resources: served("v1beta2"), queues: queueWithQuota("16"), gpus: 24, wantCode: exitcode.NoCapacity,
			wantErr: []string{"--queue team-a: the job needs 24 nvidia.com/gpu but ClusterQueue gpu-cq can hold at most 16"}},
		{name: "may not read ClusterQueues", resources: served("v1beta2"), queues: queueWithQuota("16"), gpus: 24, forbidCQ: true,
			wantWarn: "could not read the ClusterQueue of LocalQueue team-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			c.Resources = tc.resources
			if tc.forbidDisco {
				c.PrependReactor("get", "resource", forbidden)
			}
			dyn := fakeDynamic(tc.queues...)
			if tc.forbidGet {
				dyn.PrependReactor("get", LocalQueues, forbidden)
			}
			if tc.forbidCQ {
				dyn.PrependReactor("get", ClusterQueuesResource, forbidden)
			}
			var warn bytes.Buffer
			err := Check(context.Background(), c.Discovery(), dyn, "ml", "team-a", jobspec.GPUResource, tc.gpus, "", &warn)
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("Check() = %v, want nil", err)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("Check() = %v, want it to contain %q", err, w)
				}
			}
			if tc.wantCode != 0 && exitcode.Of(err) != tc.wantCode {
				t.Fatalf("exit code %d, want %d", exitcode.Of(err), tc.wantCode)
			}
			if !strings.Contains(warn.String(), tc.wantWarn) || (tc.wantWarn == "" && warn.Len() > 0) {
				t.Fatalf("warning %q, want %q", warn.String(), tc.wantWarn)
			}
		})
	}
}
