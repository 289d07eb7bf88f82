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
