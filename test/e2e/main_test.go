//go:build e2e

// Package e2e runs the built kubectl-tao binary against the repo's local cluster (a real
// kube-apiserver, job controller and scheduler; KWOK nodes and pods). `make e2e` builds the
// binary, brings the cluster up and sets KUBECONFIG and KUBECTL_TAO.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	binary     string
	kubeconfig string
	client     kubernetes.Interface
)

func TestMain(m *testing.M) {
	binary, kubeconfig = os.Getenv("KUBECTL_TAO"), os.Getenv("KUBECONFIG")
	if binary == "" || kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "e2e: KUBECTL_TAO and KUBECONFIG must be set; run `make e2e`")
		os.Exit(1)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	client = kubernetes.NewForConfigOrDie(cfg)
	os.Exit(m.Run())
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// tao runs the built binary with env added to a minimal environment.
func tao(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = taoEnv(env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running %s: %v", binary, err)
	}
	return r
}

// taoEnv is the binary's environment: a minimal one with env added. XDG_CONFIG_HOME points
// nowhere so that a developer's own defaults file (~/.config/kubectl-tao/config.yaml) never
// changes what submit does here; env, later in the list, wins where a test sets its own.
func taoEnv(env []string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig,
		"XDG_CONFIG_HOME=" + filepath.Join(os.TempDir(), "kubectl-tao-e2e-no-config")}, env...)
}

// namespace makes a namespace for one test and deletes it afterwards.
func namespace(t *testing.T) string {
	t.Helper()
	name := "e2e-" + rand.String(6)
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The local cluster runs the serviceaccount controller: pods need the default ServiceAccount.
	poll(t, 30*time.Second, "default ServiceAccount in "+name, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
	t.Cleanup(func() {
		ctx := context.Background()
		_ = client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		// Wait until the namespace's pods are gone: they hold GPUs, and the next test (preflight's
		// "free now", capacity) must find the cluster as idle as the test before found it. Pods
		// that outlive their namespace fail this test, the one that made them, rather than
		// whichever test next counts free GPUs.
		var left []string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			left = left[:0]
			for _, p := range pods.Items {
				left = append(left, fmt.Sprintf("%s (%s, on %s)", p.Name, p.Status.Phase, p.Spec.NodeName))
			}
			return len(left) == 0, nil
		})
		if err != nil {
			t.Errorf("cleanup: pods of namespace %s still there 60s after its deletion: %s", name, strings.Join(left, ", "))
		}
	})
	return name
}

func poll(t *testing.T, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func contains(t *testing.T, r result, code int, fragments ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stdout+r.stderr, f) {
			t.Fatalf("want %q in the output, got %s", f, r)
		}
	}
}

// manageJobs is a Role rule for Jobs alone: a user bound to nothing else may not touch
// Services, Secrets or nodes.
var manageJobs = rbacv1.PolicyRule{
	APIGroups: []string{"batch"}, Resources: []string{"jobs"},
	Verbs: []string{"create", "get", "list", "watch", "patch", "delete"},
}

// grantRole lets user, impersonated with --as, do in ns what rules allow and nothing more: a
// Role and a RoleBinding to it, both named after the user (the namespace goes with the test).
func grantRole(t *testing.T, ns, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// assertRolledBack checks that a failed submit (r) printed nothing to stdout and left nothing
// in ns: its Job, named job, goes by a foreground delete, so it may linger a moment while the
// garbage collector finishes.
func assertRolledBack(t *testing.T, ns, job string, r result) {
	t.Helper()
	if r.stdout != "" {
		t.Fatalf("failed submit printed to stdout: %s", r)
	}
	poll(t, 30*time.Second, "the rolled-back Job to disappear", func(ctx context.Context) (bool, error) {
		_, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	assertNoObjects(t, ns)
}

// leastPrivilegeUser makes a user (prefix and a random suffix, impersonated with --as) bound to
// exactly what `kubectl tao rbac` prints for ns, applied with kubectl; the ClusterRoleBinding,
// which outlives the namespace, goes when the test ends.
func leastPrivilegeUser(t *testing.T, ns, prefix string) string {
	t.Helper()
	user := prefix + rand.String(5)
	rbacYAML := tao(t, nil, "rbac", "-n", ns, "--user", user)
	contains(t, rbacYAML, 0, "kind: Role", "kind: ClusterRoleBinding")
	apply := exec.Command("kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(rbacYAML.stdout)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), "kubectl-tao-cluster-reader-user-"+user, metav1.DeleteOptions{})
	})
	return user
}
