package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The component commands check their argument before touching any state: a typo must not
// stop or start anything.
func TestComponentCommandArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restart", "--state-dir", dir}, "no component given"},
		{[]string{"stop", "apiserver", "--state-dir", dir}, `unknown component "apiserver"`},
		{[]string{"start", "--state-dir", dir, "etcd", "kwok"}, "unexpected arguments [kwok]"},
		{[]string{"restart", "etcd", "--state-dir", dir, "kwok"}, "unexpected arguments [kwok]"},
		// A valid component gets as far as the missing cluster.
		{[]string{"restart", "kube-apiserver", "--state-dir", dir}, "read cluster state"},
		{[]string{"stop", "--state-dir", dir, "kwok"}, "read cluster state"},
		// relabel checks the product before it looks for the cluster.
		{[]string{"relabel", "--product", "v100", "--product-nodes", "1", "--state-dir", dir}, `unknown GPU product "v100"`},
		{[]string{"relabel", "--product", "a100", "--product-nodes", "1", "--state-dir", dir}, "read cluster state"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// A bad --kubernetes-version is refused before anything is built or started.
func TestKubernetesVersionFlag(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"up", "--kubernetes-version", "1.31.14", "--state-dir", dir}, "", "--kubernetes-version: Kubernetes version \"1.31.14\" is not a release vMAJOR.MINOR.PATCH"},
		{[]string{"build", "--kubernetes-version", "v1.27.16", "--cache-dir", dir}, "", "minor 27 is outside the supported range 1.28 to 1.37"},
		{[]string{"up", "--state-dir", dir}, "v1.40.0", "minor 40 is outside the supported range"},
		// A valid one gets as far as the missing cluster.
		{[]string{"restart", "kwok", "--kubernetes-version", "v1.31.14", "--state-dir", dir}, "", "read cluster state"},
		{[]string{"build", "--real-node", "--kubernetes-version", "v1.31.14", "--cache-dir", dir, "--source-dir", dir}, "", "the real node runs Kubernetes 1.32 or newer"},
	} {
		t.Setenv("KUBERNETES_VERSION", tc.env)
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v (KUBERNETES_VERSION=%q): error %v, want it to contain %q", tc.args, tc.env, err, tc.want)
		}
	}
}
