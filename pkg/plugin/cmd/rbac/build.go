// Package rbac implements `kubectl tao rbac`: the least-privilege Role, ClusterRole and their
// bindings, built (purely) from permissions.Needed, the same list preflight reviews.
package rbac

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/permissions"
)

// Names of the roles; bindings add the subject's name.
const (
	RoleName        = "kubectl-tao"
	ClusterRoleName = "kubectl-tao-cluster-reader"
)

// Objects are what `kubectl tao rbac` prints: Role and ClusterRole always; the bindings only when
// a subject was named.
type Objects struct {
	Role               *rbacv1.Role
	RoleBinding        *rbacv1.RoleBinding
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	// GPUMetricsRole (and its binding) grant top the reads of dcgm-exporter in its namespace;
	// only with --gpu-metrics.
	GPUMetricsRole        *rbacv1.Role
	GPUMetricsRoleBinding *rbacv1.RoleBinding
}

// GPUMetricsRoleName names the Role in dcgm-exporter's namespace.
const GPUMetricsRoleName = "kubectl-tao-gpu-metrics"

// WithGPUMetrics adds the Role in metricsNS (dcgm-exporter's namespace) that lets top read the
// exporter, and its binding when a subject was named.
func WithGPUMetrics(o Objects, metricsNS string, subject *rbacv1.Subject) Objects {
	labels := map[string]string{"app.kubernetes.io/managed-by": "kubectl-tao"}
	o.GPUMetricsRole = &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: GPUMetricsRoleName, Namespace: metricsNS, Labels: labels},
		Rules:      Rules(permissions.GPUMetrics),
	}
	if subject != nil {
		o.GPUMetricsRoleBinding = &rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: bindingName(GPUMetricsRoleName, subject), Namespace: metricsNS, Labels: labels},
			Subjects:   []rbacv1.Subject{*subject},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: GPUMetricsRoleName},
		}
	}
	return o
}

// Rules turns accesses into PolicyRules, one per API group and resource, verbs in order.
func Rules(accesses []permissions.Access) []rbacv1.PolicyRule {
	type key struct{ group, resource string }
	verbs := map[key]map[string]bool{}
	var keys []key
	for _, a := range accesses {
		r := a.Resource
		if a.Subresource != "" {
			r += "/" + a.Subresource
		}
		k := key{a.Group, r}
		if verbs[k] == nil {
			verbs[k] = map[string]bool{}
			keys = append(keys, k)
		}
		verbs[k][a.Verb] = true
	}
	rules := make([]rbacv1.PolicyRule, 0, len(keys))
	for _, k := range keys {
		var vs []string
		for v := range verbs[k] {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: vs})
	}
	return rules
}

var unsafeName = regexp.MustCompile(`[^a-z0-9.-]+`)

// bindingName is role plus the subject's name, made a valid object name.
func bindingName(role string, s *rbacv1.Subject) string {
	n := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(s.Name), "-"), "-.")
	if s.Kind == rbacv1.ServiceAccountKind {
		n = s.Namespace + "-" + n
	}
	name := role + "-" + strings.ToLower(s.Kind) + "-" + n
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// Build makes the objects for namespace ns; subject may be nil.
func Build(ns string, subject *rbacv1.Subject) Objects {
	var namespaced, cluster []permissions.Access
	for _, a := range permissions.Needed {
		if a.Cluster {
			cluster = append(cluster, a)
		} else {
			namespaced = append(namespaced, a)
		}
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "kubectl-tao"}
	o := Objects{
		Role: &rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: ns, Labels: labels},
			Rules:      Rules(namespaced),
		},
		ClusterRole: &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName, Labels: labels},
			Rules:      Rules(cluster),
		},
	}
	if subject == nil {
		return o
	}
	o.RoleBinding = &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: bindingName(RoleName, subject), Namespace: ns, Labels: labels},
		Subjects:   []rbacv1.Subject{*subject},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RoleName},
	}
	o.ClusterRoleBinding = &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: bindingName(ClusterRoleName, subject), Labels: labels},
		Subjects:   []rbacv1.Subject{*subject},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
	}
	return o
}

// ParseSubject reads --user, --group or --serviceaccount NS:SA; at most one may be set.
func ParseSubject(user, group, sa string) (*rbacv1.Subject, error) {
	set := 0
	for _, v := range []string{user, group, sa} {
		if v != "" {
			set++
		}
	}
	switch {
	case set > 1:
		return nil, fmt.Errorf("--user, --group and --serviceaccount exclude each other: give one")
	case user != "":
		return &rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}, nil
	case group != "":
		return &rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}, nil
	case sa != "":
		ns, name, ok := strings.Cut(sa, ":")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("invalid --serviceaccount %q: expected NAMESPACE:NAME", sa)
		}
		return &rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}, nil
	}
	return nil, nil
}

// Comments explain, above each document, what it is for and what degrades without it.
func Comments(o Objects) map[string]string {
	var cluster []string
	for _, a := range permissions.Needed {
		if a.Cluster {
			cluster = append(cluster, fmt.Sprintf("#   %s: %s", a, a.For))
		}
	}
	return map[string]string{
		"GPUMetricsRole": "# Lets `kubectl tao top` read dcgm-exporter's GPU numbers through the API server's pod proxy,\n" +
			"# in the exporter's namespace only: pods/proxy reaches whatever a pod serves, so never grant it cluster-wide.\n" +
			"# Without it top runs nvidia-smi in the ranks instead (pods/exec in the job's namespace).\n",
		"GPUMetricsRoleBinding": "# Binds the GPU metrics Role in the exporter's namespace.\n",
		"Role": "# What every kubectl tao command needs in namespace " + o.Role.Namespace + ".\n" +
			"# update jobs/finalizers is needed only where the OwnerReferencesPermissionEnforcement admission plugin runs.\n",
		"ClusterRole": "# Cluster-wide reads. Without them nothing breaks, checks degrade:\n" + strings.Join(cluster, "\n") + "\n" +
			"# without nodes, submit skips its capacity guard (with a warning), preflight skips its GPU and fit checks,\n" +
			"# and `kubectl tao capacity` fails; without pods of all namespaces, free GPUs are unknown.\n",
	}
}
