//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
)

// TestRealNodeSecretEnv submits --secret-env on the real node: the container sees each value in
// its environment, byte for byte (the kubelet expands nothing in a secretKeyRef). The trainer
// prints its environment hex-encoded only, so the logs hold no value as text.
func TestRealNodeSecretEnv(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	ngc, hf := "nvapi-RealNode$(HOME)$$Key+/=", "hf_RealNode Token ü"
	env := []string{"NGC_KEY=" + ngc, "MY_HF=" + hf}
	submitRealEnv(t, env, n, ns, "keyed", []string{"--secret-env", "NGC_KEY", "--secret-env", "HF_TOKEN=MY_HF"},
		trainerPath, "--print-args", "--steps", "0", "--rendezvous=false")
	waitComplete(t, ns, "keyed")
	logs := jobLogs(t, ns, "keyed")
	got := decodeArgv(t, logs[0], 0).Env
	for _, want := range []string{"NGC_KEY=" + ngc, "HF_TOKEN=" + hf} {
		if !slices.Contains(got, want) {
			t.Errorf("the container's environment lacks %q: %q", want, got)
		}
	}
	assertNoneOf(t, "the logs", strings.Join(logs[0], "\n"), ngc, hf)
}
