package rbac

import (
	"bytes"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/permissions"
)

// Every access in Needed is granted by exactly one rule, and nothing else is.
func TestRolesGrantExactlyNeeded(t *testing.T) {
	o := Build("ml", &rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "Alice@Example.com"})
	granted := map[string]bool{}
	add := func(rules []rbacv1.PolicyRule, scope string) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						granted[scope+" "+v+" "+g+"/"+res] = true
					}
				}
			}
		}
	}
	add(o.Role.Rules, "ns")
	add(o.ClusterRole.Rules, "cluster")
	want := map[string]bool{}
	for _, a := range permissions.Needed {
		scope, res := "ns", a.Resource
		if a.Cluster {
			scope = "cluster"
		}
		if a.Subresource != "" {
			res += "/" + a.Subresource
		}
		want[scope+" "+a.Verb+" "+a.Group+"/"+res] = true
	}
	for k := range want {
		if !granted[k] {
			t.Errorf("needed but not granted: %s", k)
		}
	}
	for k := range granted {
		if !want[k] {
			t.Errorf("granted but not needed: %s", k)
		}
	}
	for _, must := range []string{"ns patch batch/jobs", "ns delete batch/jobs", "ns update batch/jobs/finalizers", "ns get /pods/log", "ns create /pods/exec", "ns create /pods/portforward", "ns get /secrets", "cluster list /nodes",
		"ns get kueue.x-k8s.io/localqueues", "ns list kueue.x-k8s.io/localqueues"} {
		if !granted[must] {
			t.Errorf("missing %s", must)
		}
	}
	if o.RoleBinding.Name != "kubectl-tao-user-alice-example.com" || o.RoleBinding.Namespace != "ml" || o.ClusterRoleBinding.RoleRef.Name != ClusterRoleName {
		t.Errorf("bindings %s %s", o.RoleBinding.Name, o.ClusterRoleBinding.RoleRef.Name)
	}
}

func TestPrintIsApplicableYAML(t *testing.T) {
	var buf bytes.Buffer
	s, _ := ParseSubject("", "", "ci:runner")
	if err := Print(&buf, Build("ml", s)); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "---\n")[1:]
	var kinds []string
	for _, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		kinds = append(kinds, obj["kind"].(string))
	}
	if got := strings.Join(kinds, ","); got != "Role,RoleBinding,ClusterRole,ClusterRoleBinding" {
		t.Fatalf("kinds %s\n%s", got, buf.String())
	}
	for _, w := range []string{"kind: ServiceAccount\n  name: runner\n  namespace: ci", "# Cluster-wide reads. Without them nothing breaks", "submit skips its capacity guard"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("missing %q in\n%s", w, buf.String())
		}
	}
}

func TestPrintWithoutSubject(t *testing.T) {
	var buf bytes.Buffer
	if err := Print(&buf, Build("ml", nil)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Binding\n") || !strings.Contains(buf.String(), "bind the roles yourself") {
		t.Fatalf("%s", buf.String())
	}
}

func TestParseSubject(t *testing.T) {
	for _, bad := range [][3]string{{"a", "b", ""}, {"", "", "nocolon"}, {"", "", ":x"}} {
		if _, err := ParseSubject(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if s, _ := ParseSubject("", "ml-team", ""); s.Kind != rbacv1.GroupKind || s.Name != "ml-team" {
		t.Errorf("group %+v", s)
	}
}

// --gpu-metrics: a Role in the exporter's namespace only, granting pods/proxy there and
// nothing cluster-wide; the Role and ClusterRole are unchanged.
func TestGPUMetricsRole(t *testing.T) {
	subject := &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "ci", Name: "runner"}
	plain := Build("ml", subject)
	o := WithGPUMetrics(Build("ml", subject), "monitoring", subject)
	if o.GPUMetricsRole.Namespace != "monitoring" || o.GPUMetricsRoleBinding.Namespace != "monitoring" {
		t.Fatalf("namespaces %s %s", o.GPUMetricsRole.Namespace, o.GPUMetricsRoleBinding.Namespace)
	}
	got, _ := yaml.Marshal(o.GPUMetricsRole.Rules)
	want := "- apiGroups:\n  - \"\"\n  resources:\n  - pods/proxy\n  verbs:\n  - get\n- apiGroups:\n  - \"\"\n  resources:\n  - pods\n  verbs:\n  - list\n"
	if string(got) != want {
		t.Errorf("rules:\n%s\nwant:\n%s", got, want)
	}
	for _, r := range append(o.Role.Rules, o.ClusterRole.Rules...) {
		for _, res := range r.Resources {
			if res == "pods/proxy" {
				t.Errorf("pods/proxy granted outside the exporter's namespace: %+v", r)
			}
		}
	}
	a, _ := yaml.Marshal(plain.ClusterRole)
	b, _ := yaml.Marshal(o.ClusterRole)
	if string(a) != string(b) {
		t.Errorf("--gpu-metrics changed the ClusterRole")
	}
	var buf bytes.Buffer
	if err := Print(&buf, o); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Count(out, "\nkind: Role\n") != 2 || !strings.Contains(out, "never grant it cluster-wide") ||
		!strings.Contains(out, "name: kubectl-tao-gpu-metrics-serviceaccount-ci-runner") {
		t.Errorf("printed:\n%s", out)
	}
	if o := WithGPUMetrics(Build("ml", nil), "gpu-operator", nil); o.GPUMetricsRoleBinding != nil {
		t.Errorf("a binding without a subject")
	}
}
