//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

// TestRealNodeSecretEnv submits --secret-env on the real node: the container sees each value in
// its environment, byte for byte (the kubelet expands nothing in a secretKeyRef), while the
// command prints only their SHA-256, so the logs hold no value either.
func TestRealNodeSecretEnv(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	ngc, hf := "nvapi-RealNode$(HOME)$$Key+/=", "hf_RealNode Token ü"
	env := []string{"NGC_KEY=" + ngc, "MY_HF=" + hf}
	submitRealEnv(t, env, n, ns, "keyed", []string{"--secret-env", "NGC_KEY", "--secret-env", "HF_TOKEN=MY_HF"},
		`printf 'ngc %s\n' "$(printf %s "$NGC_KEY" | sha256sum | cut -d' ' -f1)"; printf 'hf %s\n' "$(printf %s "$HF_TOKEN" | sha256sum | cut -d' ' -f1)"`)
	waitComplete(t, ns, "keyed")
	logs := jobLogs(t, ns, "keyed")
	sum := func(v string) string { s := sha256.Sum256([]byte(v)); return hex.EncodeToString(s[:]) }
	for _, want := range []string{"ngc " + sum(ngc), "hf " + sum(hf)} {
		if !slices.Contains(logs[0], want) {
			t.Errorf("the container did not see the value: want %q in\n%s", want, strings.Join(logs[0], "\n"))
		}
	}
	assertNoneOf(t, "the logs", strings.Join(logs[0], "\n"), ngc, hf)
}
