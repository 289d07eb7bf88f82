package util

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const kubeconfig = `apiVersion: v1
kind: Config
current-context: ctx-a
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ctx-a
  context: {cluster: c, user: u, namespace: team-a}
- name: ctx-b
  context: {cluster: c, user: u, namespace: team-b}
- name: ctx-none
  context: {cluster: c, user: u}
`

func TestNamespacePrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		flagNS, flagCtx string
		envNS, envCtx   string
		wantNS          string
	}{
		{"kubeconfig's current context", "", "", "", "", "team-a"},
		{"env namespace beats kubeconfig", "", "", "env-ns", "", "env-ns"},
		{"flag namespace beats env", "flag-ns", "", "env-ns", "", "flag-ns"},
		{"env context picks its namespace", "", "", "", "ctx-b", "team-b"},
		{"flag context beats env context", "", "ctx-a", "", "ctx-b", "team-a"},
		{"context without namespace falls back to default", "", "ctx-none", "", "", "default"},
		{"env namespace beats the env context's", "", "", "env-ns", "ctx-b", "env-ns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flags := genericclioptions.NewConfigFlags(true)
			*flags.KubeConfig, *flags.Namespace, *flags.Context = path, tc.flagNS, tc.flagCtx
			env := map[string]string{EnvNamespace: tc.envNS, EnvContext: tc.envCtx}
			ns, err := NewFactory(flags, func(k string) string { return env[k] }).Namespace()
			if err != nil || ns != tc.wantNS {
				t.Fatalf("Namespace() = %q, %v; want %q", ns, err, tc.wantNS)
			}
		})
	}
}

func TestNoKubeconfigIsAClearError(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	f := NewFactory(genericclioptions.NewConfigFlags(true), func(string) string { return "" })
	if ns, err := f.Namespace(); err != nil || ns != "default" {
		t.Errorf("Namespace() = %q, %v; want default without a kubeconfig", ns, err)
	}
	_, err := f.KubernetesClient()
	if exitcode.Of(err) != exitcode.NoCluster || !strings.Contains(err.Error(), "Could not authenticate to a Kubernetes cluster") ||
		!strings.Contains(err.Error(), "kubectl get nodes") {
		t.Fatalf("KubernetesClient() = %v (exit %d), want the contract's message and exit 5", err, exitcode.Of(err))
	}
}

func TestServerFlagNeedsNoKubeconfig(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	flags := genericclioptions.NewConfigFlags(true)
	*flags.APIServer = "https://127.0.0.1:6443"
	if _, err := NewFactory(flags, func(string) string { return "" }).KubernetesClient(); err != nil {
		t.Fatalf("KubernetesClient() with --server = %v", err)
	}
}

func TestParseDryRun(t *testing.T) {
	for _, ok := range []string{"none", "client", "server"} {
		if d, err := ParseDryRun(ok); err != nil || string(d) != ok {
			t.Errorf("ParseDryRun(%q) = %q, %v", ok, d, err)
		}
	}
	for _, bad := range []string{"", "true", "Client", "all"} {
		if _, err := ParseDryRun(bad); exitcode.Of(err) != exitcode.Usage {
			t.Errorf("ParseDryRun(%q) = %v, want a usage error", bad, err)
		}
	}
}

func TestRaiseRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		requests  []int
		wantQPS   float32
		wantBurst int
	}{
		{"default", nil, clientQPS, clientBurst},
		{"a fan-out within the default burst keeps it", []int{64}, clientQPS, clientBurst},
		{"a bigger fan-out raises the burst above it", []int{500}, 500, 510},
		{"a later, smaller request does not lower it", []int{500, 64}, 500, 510},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flags := genericclioptions.NewConfigFlags(true)
			*flags.KubeConfig = path
			f := NewFactory(flags, func(string) string { return "" })
			for _, n := range tc.requests {
				RaiseRateLimit(f, n)
			}
			cfg, err := f.(*factory).restConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst {
				t.Fatalf("QPS %v burst %d, want %v %d", cfg.QPS, cfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
