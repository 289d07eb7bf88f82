//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The --secret-env values of these tests: no printed output, request or object but the Secret
// NAME-env may hold them.
const (
	e2eNGCKey  = "nvapi-E2eSecretEnvNgcKey0123456789"
	e2eHFToken = "hf_E2eSecretEnv/Token+Value="
)

// keyEnv holds the NGC key under its own name, the Hugging Face token under another.
var keyEnv = []string{"NGC_KEY=" + e2eNGCKey, "MY_HF=" + e2eHFToken}

func assertNoKeys(t *testing.T, what, text string) {
	t.Helper()
	assertNoneOf(t, what, text, e2eNGCKey, e2eHFToken)
}

// secretEnvArgs submits a job that reads both credentials and that KWOK completes after a second.
func secretEnvArgs(ns, name string, extra ...string) []string {
	return append([]string{"submit", name, "-n", ns, "--image", "busybox", "--gpus", "1",
		"--secret-env", "NGC_KEY", "--secret-env", "HF_TOKEN=MY_HF", "--annotation", "sim.kubectl-tao.dev/run-duration=1s"}, extra...)
}

// assertNoSecrets fails if a Secret kubectl-tao made is left in ns.
func assertNoSecrets(t *testing.T, ns string) {
	t.Helper()
	secrets, err := client.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kubectl-tao"})
	if err != nil || len(secrets.Items) != 0 {
		t.Fatalf("secrets left: %v %v", secrets, err)
	}
}

func TestSecretEnv(t *testing.T) {
	ns := namespace(t)

	// Dry runs print the Secret, redacted, and create nothing.
	for _, dry := range []string{"--dry-run=client", "--dry-run=server"} {
		for _, format := range []string{"yaml", "json"} {
			r := tao(t, keyEnv, append(secretEnvArgs(ns, "dry", dry, "-o", format), "--", "train.sh")...)
			contains(t, r, 0, "REDACTED", "NGC_KEY", "HF_TOKEN", "dry-env")
			assertNoKeys(t, "submit "+dry+" -o "+format, r.stdout+r.stderr)
		}
	}
	assertNoObjects(t, ns)
	assertNoSecrets(t, ns)

	r := tao(t, keyEnv, append(secretEnvArgs(ns, "keyed", "-o", "yaml"), "--", "train.sh")...)
	contains(t, r, 0, "kind: Secret", "name: keyed-env", "NGC_KEY: REDACTED")
	assertNoKeys(t, "submit -o yaml", r.stdout+r.stderr)

	job, secret := ownedSecret(t, ns, "keyed", "keyed-env")
	if string(secret.Data["NGC_KEY"]) != e2eNGCKey || string(secret.Data["HF_TOKEN"]) != e2eHFToken || len(secret.Data) != 2 || !*secret.Immutable {
		t.Fatalf("secret = %+v", secret.ObjectMeta)
	}
	assertNoKeys(t, "the Job", asJSON(t, job))

	pod := completedPod(t, ns, "keyed")
	assertNoKeys(t, "the pod", asJSON(t, pod))
	found := map[string]bool{}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "NGC_KEY" || e.Name == "HF_TOKEN" {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				e.ValueFrom.SecretKeyRef.Name != "keyed-env" || e.ValueFrom.SecretKeyRef.Key != e.Name {
				t.Fatalf("env %+v, want a secretKeyRef to keyed-env", e)
			}
			found[e.Name] = true
		}
	}
	if len(found) != 2 {
		t.Fatalf("pod env = %+v, want NGC_KEY and HF_TOKEN", pod.Spec.Containers[0].Env)
	}

	// What the other commands print holds no credential either.
	assertCommandsHoldNone(t, ns, "keyed", e2eNGCKey, e2eHFToken)

	contains(t, tao(t, nil, "delete", "keyed", "-n", ns), 0)
	poll(t, 30*time.Second, "the Secret to go with its Job", secretGone(ns, "keyed-env"))
}

func TestSecretEnvCancelRemovesTheSecret(t *testing.T) {
	ns := namespace(t)
	assertCancelRemovesSecret(t, ns, "running-env", keyEnv, append(secretEnvArgs(ns, "running", "--annotation", "sim.kubectl-tao.dev/fate=run-forever"), "--", "true"))
}

// An unset variable, a value where a name belongs and a credential as a plain --env: exit 2,
// nothing created, no value echoed.
func TestSecretEnvRefusesBadInputAndCreatesNothing(t *testing.T) {
	ns := namespace(t)
	r := tao(t, []string{"MY_HF=" + e2eHFToken}, append(secretEnvArgs(ns, "unset"), "--", "true")...)
	contains(t, r, 2, "--secret-env: $NGC_KEY is unset or empty in this shell")
	assertNoKeys(t, "the error", r.stdout+r.stderr)

	r = tao(t, keyEnv, "submit", "typed", "-n", ns, "--image", "busybox", "--gpus", "0", "--secret-env", "NGC_KEY="+e2eNGCKey, "--", "true")
	contains(t, r, 2, "LOCAL_NAME must be the name of a variable")
	assertNoKeys(t, "the error", r.stdout+r.stderr)

	r = tao(t, keyEnv, "submit", "plain", "-n", ns, "--image", "busybox", "--gpus", "0", "--env", "NGC_KEY="+e2eNGCKey, "--", "true")
	contains(t, r, 2, "--env NGC_KEY: that looks like a credential", "--secret-env NGC_KEY", "--env-from-secret")
	assertNoKeys(t, "the error", r.stdout+r.stderr)

	assertNoObjects(t, ns)
	assertNoSecrets(t, ns)

	// The escape hatch, for a name that only looks secret.
	r = tao(t, nil, "submit", "allowed", "-n", ns, "--image", "busybox", "--gpus", "0",
		"--env", "MAX_NEW_TOKEN=512", "--env-allow", "MAX_NEW_TOKEN", "--dry-run=server", "-o", "yaml", "--", "true")
	contains(t, r, 0, "name: MAX_NEW_TOKEN", `value: "512"`)
}

func TestSecretEnvRBACDeniedSecretRollsBack(t *testing.T) {
	ns := namespace(t)
	grantRole(t, ns, "jobs-only-user", manageJobs)
	assertSecretDeniedRollsBack(t, ns, "denied", "denied-env", keyEnv, append(secretEnvArgs(ns, "denied", "--as", "jobs-only-user"), "--", "true"),
		e2eNGCKey, e2eHFToken)
}

// A user bound to exactly what `kubectl tao rbac` prints can submit with --secret-env.
func TestSecretEnvLeastPrivilege(t *testing.T) {
	ns := namespace(t)
	user := leastPrivilegeUser(t, ns, "tao-env-")
	r := tao(t, keyEnv, append(secretEnvArgs(ns, "mine", "--as", user, "--wait"), "--", "true")...)
	contains(t, r, 0, "secret/mine-env created", "job.batch/mine Complete")
}
