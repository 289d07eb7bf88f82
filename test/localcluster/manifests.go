package localcluster

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// The kwok CRDs are copied verbatim from sigs.k8s.io/kwok@v0.8.0/kustomize/crd/bases: only the
// kinds kwok is started with in --enable-crds.
//
//go:embed manifests/stages.yaml
var stagesYAML []byte

//go:embed manifests/kwok.x-k8s.io_stages.yaml manifests/kwok.x-k8s.io_logs.yaml manifests/kwok.x-k8s.io_clusterlogs.yaml
//go:embed manifests/kwok.x-k8s.io_execs.yaml manifests/kwok.x-k8s.io_portforwards.yaml
var crdFS embed.FS

// kwokCRDs are the kinds kwok reads from the API instead of from --config. Exec and PortForward
// are per pod, named after it: a test that creates one makes `kubectl exec` run a local command
// (in a directory it chooses) and `kubectl port-forward` reach a local port; pods without one
// have no exec or port-forward, as before. There is deliberately no ClusterExec: exec into any
// pod must not run commands on the machine.
var kwokCRDs = []string{"Stage", "Logs", "ClusterLogs", "Exec", "PortForward"}

var (
	crdGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	stageGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "stages"}
	logsGVR  = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}
)

// fieldManager names this launcher in managedFields.
const fieldManager = "kubectl-tao-localcluster"

// DecodeManifests splits a multi-document YAML stream into objects, skipping empty documents
// (comment-only headers, trailing separators).
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifest document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("manifest document %d has no kind or name", i)
		}
		objs = append(objs, u)
	}
}

// Stages returns the embedded kwok Stage objects.
func Stages() ([]*unstructured.Unstructured, error) {
	return DecodeManifests(stagesYAML)
}

// CRDs returns the embedded kwok CustomResourceDefinitions.
func CRDs() ([]*unstructured.Unstructured, error) {
	var all []*unstructured.Unstructured
	for _, name := range []string{"manifests/kwok.x-k8s.io_stages.yaml", "manifests/kwok.x-k8s.io_logs.yaml", "manifests/kwok.x-k8s.io_clusterlogs.yaml",
		"manifests/kwok.x-k8s.io_execs.yaml", "manifests/kwok.x-k8s.io_portforwards.yaml"} {
		data, err := crdFS.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read embedded %s: %w", name, err)
		}
		objs, err := DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		all = append(all, objs...)
	}
	return all, nil
}

// apply server-side-applies obj, so re-running up on a live cluster updates stages in place.
func apply(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	force := true
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := obj.GetNamespace(); ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force}); err != nil {
		return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// InstallKwokObjects applies the kwok CRDs, waits until the API serves them, then applies the
// stages. kwok must start after this: it lists Stages once at start-up.
func InstallKwokObjects(ctx context.Context, dyn dynamic.Interface) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := apply(ctx, dyn, crdGVR, crd); err != nil {
			return err
		}
	}
	for _, crd := range crds {
		if err := waitEstablished(ctx, dyn, crd.GetName()); err != nil {
			return err
		}
	}
	stages, err := Stages()
	if err != nil {
		return err
	}
	// A freshly established CRD can still 404 for a moment while discovery catches up.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, s := range stages {
			if err := apply(ctx, dyn, stageGVR, s); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitEstablished waits until the CRD name is established, so its resources can be used.
func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %s to be established: %w", name, err)
	}
	return nil
}
