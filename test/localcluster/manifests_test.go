package localcluster

import (
	"strings"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kwokTemplateFuncs stands in for the functions kwok offers stage templates, so templates can
// be checked for syntax without running kwok.
func kwokTemplateFuncs() template.FuncMap {
	stub := func(...any) any { return "" }
	m := template.FuncMap{}
	for _, name := range []string{"Now", "Quote", "YAML", "NodeConditions", "NodeIP", "NodeName", "NodePort", "Version", "NodeIPsWith", "PodIPsWith", "dict"} {
		m[name] = stub
	}
	return m
}

func TestStagesParse(t *testing.T) {
	stages, err := Stages()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range stages {
		if s.GetAPIVersion() != "kwok.x-k8s.io/v1alpha1" || s.GetKind() != "Stage" {
			t.Errorf("%s: %s %s is not a kwok Stage", s.GetName(), s.GetAPIVersion(), s.GetKind())
		}
		if names[s.GetName()] {
			t.Errorf("duplicate stage %s", s.GetName())
		}
		names[s.GetName()] = true
		tmpl, _, _ := unstructured.NestedString(s.Object, "spec", "next", "statusTemplate")
		if tmpl != "" {
			if _, err := template.New(s.GetName()).Funcs(kwokTemplateFuncs()).Parse(tmpl); err != nil {
				t.Errorf("%s: status template does not parse: %v", s.GetName(), err)
			}
		}
		kind, _, _ := unstructured.NestedString(s.Object, "spec", "resourceRef", "kind")
		if kind == "Pod" && s.GetName() != "pod-delete" && !strings.Contains(selectorText(s), ".metadata.deletionTimestamp DoesNotExist") {
			t.Errorf("%s: a pod stage other than pod-delete must skip terminating pods", s.GetName())
		}
	}
	for _, want := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete", "pod-oom-killed", "pod-exit-error", "pod-err-image-pull", "pod-image-pull-backoff", "pod-evicted", "pod-crash"} {
		if !names[want] {
			t.Errorf("missing stage %s", want)
		}
	}
}

// selectorText flattens a stage's matchExpressions to "key operator values" lines.
func selectorText(s *unstructured.Unstructured) string {
	exprs, _, _ := unstructured.NestedSlice(s.Object, "spec", "selector", "matchExpressions")
	var b strings.Builder
	for _, e := range exprs {
		m := e.(map[string]any)
		b.WriteString(m["key"].(string) + " " + m["operator"].(string))
		if vals, ok := m["values"].([]any); ok {
			for _, v := range vals {
				b.WriteString(" " + v.(string))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Each fate must be picked up by exactly the stage meant for it, and the terminal stages must
// never both match one pod.
func TestFateSelectors(t *testing.T) {
	stages, err := Stages()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, s := range stages {
		byName[s.GetName()] = selectorText(s)
	}
	fate := `.metadata.annotations["sim.kubectl-tao.dev/fate"]`
	checks := map[string]string{
		"pod-complete":       fate + ` // "succeed" In succeed`,
		"pod-oom-killed":     fate + " In oom",
		"pod-exit-error":     fate + " In exit",
		"pod-err-image-pull": fate + " In image-pull-backoff",
		"pod-ready":          fate + " NotIn image-pull-backoff",
	}
	for stage, want := range checks {
		if !strings.Contains(byName[stage], want) {
			t.Errorf("stage %s selector lacks %q:\n%s", stage, want, byName[stage])
		}
	}
	// An eviction is triggered by a label on one running pod, and then no other terminal stage
	// may match it: a pod evicted by one stage must not "succeed" or "OOM" by another later.
	evict := `.metadata.labels["sim.kubectl-tao.dev/evict"]`
	if !strings.Contains(byName["pod-evicted"], evict+" Exists") || !strings.Contains(byName["pod-evicted"], ".status.phase In Running") {
		t.Errorf("pod-evicted must select running pods with the evict label:\n%s", byName["pod-evicted"])
	}
	for _, stage := range []string{"pod-complete", "pod-oom-killed", "pod-exit-error"} {
		if !strings.Contains(byName[stage], evict+" DoesNotExist") {
			t.Errorf("stage %s must skip pods labelled for eviction:\n%s", stage, byName[stage])
		}
	}
	// A crash is triggered the same way; every other terminal stage skips crash-labelled pods.
	crash := `.metadata.labels["sim.kubectl-tao.dev/crash"]`
	if !strings.Contains(byName["pod-crash"], crash+" Exists") || !strings.Contains(byName["pod-crash"], ".status.phase In Running") {
		t.Errorf("pod-crash must select running pods with the crash label:\n%s", byName["pod-crash"])
	}
	for _, stage := range []string{"pod-complete", "pod-oom-killed", "pod-exit-error", "pod-evicted"} {
		if !strings.Contains(byName[stage], crash+" DoesNotExist") {
			t.Errorf("stage %s must skip pods labelled to crash:\n%s", stage, byName[stage])
		}
	}
	for _, s := range stages {
		if strings.Contains(selectorText(s), "run-forever") {
			t.Errorf("stage %s mentions run-forever; that fate is the absence of a terminal stage", s.GetName())
		}
	}
}

func TestCRDsParse(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range crds {
		if c.GetKind() != "CustomResourceDefinition" {
			t.Errorf("%s is a %s", c.GetName(), c.GetKind())
		}
		k, _, _ := unstructured.NestedString(c.Object, "spec", "names", "kind")
		kinds = append(kinds, k)
	}
	if strings.Join(kinds, ",") != strings.Join(kwokCRDs, ",") {
		t.Errorf("CRD kinds %v, want %v (the --enable-crds list)", kinds, kwokCRDs)
	}
}

func TestKwokConfigurationHasNoCRDKinds(t *testing.T) {
	var m map[string]any
	if err := utilyaml.Unmarshal([]byte(KwokConfiguration()), &m); err != nil {
		t.Fatal(err)
	}
	if m["kind"] != "KwokConfiguration" {
		t.Errorf("kind = %v", m["kind"])
	}
	opts := m["options"].(map[string]any)
	if opts["enableDebuggingHandlers"] != true {
		t.Error("without enableDebuggingHandlers kwok answers 405 to kubectl logs")
	}
	if opts["nodeLeaseDurationSeconds"] == nil || opts["nodePlayStageParallelism"] == nil {
		t.Errorf("options = %v", opts)
	}
}

func TestDecodeManifestsSkipsEmptyAndRejectsNameless(t *testing.T) {
	objs, err := DecodeManifests([]byte("# header\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n"))
	if err != nil || len(objs) != 1 {
		t.Fatalf("got %d objects, %v", len(objs), err)
	}
	if _, err := DecodeManifests([]byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil {
		t.Error("a nameless object must be rejected")
	}
}
