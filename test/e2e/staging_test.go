//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The credentials of these tests: no printed output, request or object but the Secret may hold them.
const (
	e2eAccessKey = "AKIAE2ESTAGINGACCESS"
	e2eSecretKey = "e2e/Staging+Secret=Key"
)

var s3Env = []string{
	"ACCESS_KEY=" + e2eAccessKey, "SECRET_KEY=" + e2eSecretKey,
	"S3_BUCKET_NAME=e2e-results", "S3_ENDPOINT_URL=http://127.0.0.1:9",
}

// stagedArgs submits a staged job that KWOK completes after a second.
func stagedArgs(ns, name string, extra ...string) []string {
	return append([]string{"submit", name, "-n", ns, "--image", "busybox", "--gpus", "1",
		"--stager-image", "registry.invalid/kubectl-tao:e2e",
		"--input", "/data=s3://e2e-datasets/coco/", "--input", "/specs/train.yaml=s3://e2e-datasets/specs/train.yaml",
		"--output-path", "/results", "--annotation", "sim.kubectl-tao.dev/run-duration=1s"}, extra...)
}

// assertNoCredentials greps text for the credentials, raw and base64-encoded.
func assertNoCredentials(t *testing.T, what, text string) {
	t.Helper()
	assertNoneOf(t, what, text, e2eAccessKey, e2eSecretKey)
}

// assertNoneOf greps text for each of secrets, raw and base64-encoded.
func assertNoneOf(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, v := range secrets {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(text, form) {
				t.Fatalf("a credential leaked into %s:\n%s", what, text)
			}
		}
	}
}

// ownedSecret gets the Job and the Secret submit made with it, and checks that the Job owns it.
func ownedSecret(t *testing.T, ns, job, name string) (*batchv1.Job, *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refs := secret.OwnerReferences
	if len(refs) != 1 || refs[0].UID != j.UID || refs[0].Kind != "Job" || !*refs[0].BlockOwnerDeletion || !*refs[0].Controller {
		t.Fatalf("secret owner references = %+v, want the Job %s", refs, j.UID)
	}
	return j, secret
}

// completedPod waits for a one-rank job to complete and returns its pod.
func completedPod(t *testing.T, ns, job string) corev1.Pod {
	t.Helper()
	poll(t, 60*time.Second, "job "+job+" to complete", jobFinished(ns, job, batchv1.JobComplete))
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %d", err, len(pods.Items))
	}
	return pods.Items[0]
}

// assertCommandsHoldNone runs the commands that show a job and fails if one prints a secret.
func assertCommandsHoldNone(t *testing.T, ns, job string, secrets ...string) {
	t.Helper()
	for _, args := range [][]string{
		{"status", job}, {"status", job, "-o", "json"}, {"logs", job}, {"diagnose", job},
		{"diagnose", job, "-o", "json"}, {"replicas", job, "-o", "yaml"}, {"list", "-o", "yaml"}, {"list", "-o", "wide"},
	} {
		r := tao(t, nil, append(args, "-n", ns)...)
		if r.code != 0 {
			t.Fatalf("%v: %s", args, r)
		}
		assertNoneOf(t, strings.Join(args, " "), r.stdout+r.stderr, secrets...)
	}
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStagingWithShellCredentials(t *testing.T) {
	ns := namespace(t)

	// Dry runs print the Secret, redacted.
	for _, dry := range []string{"--dry-run=client", "--dry-run=server"} {
		for _, format := range []string{"yaml", "json"} {
			r := tao(t, s3Env, append(stagedArgs(ns, "dry", dry, "-o", format), "--", "python train.py")...)
			contains(t, r, 0, "REDACTED", "SECRET_KEY")
			assertNoCredentials(t, "submit "+dry+" -o "+format, r.stdout+r.stderr)
		}
	}
	assertNoObjects(t, ns)

	r := tao(t, s3Env, append(stagedArgs(ns, "staged", "-o", "yaml"), "--", "python train.py")...)
	contains(t, r, 0, "kind: Secret", "name: staged-s3")
	assertNoCredentials(t, "submit -o yaml", r.stdout+r.stderr)

	job, secret := ownedSecret(t, ns, "staged", "staged-s3")
	if string(secret.Data["SECRET_KEY"]) != e2eSecretKey || string(secret.Data["S3_BUCKET_NAME"]) != "e2e-results" || !*secret.Immutable {
		t.Fatalf("secret = %+v", secret.ObjectMeta)
	}
	assertNoCredentials(t, "the Job", asJSON(t, job))

	pod := completedPod(t, ns, "staged")
	assertNoCredentials(t, "the pod", asJSON(t, pod))
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != "tao-stager" ||
		pod.Spec.InitContainers[0].Image != "registry.invalid/kubectl-tao:e2e" {
		t.Fatalf("init containers = %+v", pod.Spec.InitContainers)
	}
	if st := pod.Status.InitContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container status = %+v", st)
	}
	emptyDir := false
	for _, v := range pod.Spec.Volumes {
		emptyDir = emptyDir || (v.Name == "tao-stager" && v.EmptyDir != nil)
	}
	if !emptyDir {
		t.Fatalf("volumes = %+v, want the emptyDir tao-stager", pod.Spec.Volumes)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for _, k := range []string{"ACCESS_KEY", "SECRET_KEY", "S3_BUCKET_NAME", "S3_ENDPOINT_URL"} {
		if e := env[k]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "staged-s3" {
			t.Fatalf("env %s = %+v, want a secretKeyRef to staged-s3", k, e)
		}
	}
	// The Job controller labels the pod with the Job's UID: TAO_JOB_UID reads it from there.
	if pod.Labels["batch.kubernetes.io/controller-uid"] != string(job.UID) || env["TAO_JOB_ID"].Value != "staged" ||
		env["TAO_JOB_UID"].ValueFrom == nil || env["TAO_JOB_UID"].ValueFrom.FieldRef == nil {
		t.Fatalf("job identity: label %q, env %+v %+v", pod.Labels["batch.kubernetes.io/controller-uid"], env["TAO_JOB_ID"], env["TAO_JOB_UID"])
	}

	// What the other commands print holds no credential either.
	assertCommandsHoldNone(t, ns, "staged", e2eAccessKey, e2eSecretKey)

	// The Secret lives and dies with the Job (a finished Job is removed with delete, a running one
	// with cancel: see TestStagingCancelRemovesTheSecret).
	contains(t, tao(t, nil, "delete", "staged", "-n", ns), 0)
	poll(t, 30*time.Second, "the Secret to go with its Job", secretGone(ns, "staged-s3"))
}

func TestStagingCancelRemovesTheSecret(t *testing.T) {
	ns := namespace(t)
	assertCancelRemovesSecret(t, ns, "running-s3", s3Env, append(stagedArgs(ns, "running", "--annotation", "sim.kubectl-tao.dev/fate=run-forever"), "--", "true"))
}

// assertCancelRemovesSecret submits (args, env) a job named "running" that runs until canceled,
// cancels it, and waits for its Secret to go.
func assertCancelRemovesSecret(t *testing.T, ns, secret string, env, args []string) {
	t.Helper()
	r := tao(t, env, args...)
	contains(t, r, 0, "secret/"+secret+" created")
	poll(t, 60*time.Second, "the rank to run", runningPods(ns, "running", 1))
	contains(t, tao(t, nil, "cancel", "running", "-n", ns, "--timeout", "60s"), 0, "job.batch/running canceled")
	// cancel returns once the Job and its pods are gone; the GC removes the owned Secret with it.
	poll(t, 30*time.Second, "the Secret to go with its Job", secretGone(ns, secret))
}

func secretGone(ns, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}
}

func TestStagingReferencesAnExistingSecret(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	team := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "team-s3", Namespace: ns}, StringData: map[string]string{
		"ACCESS_KEY": e2eAccessKey, "SECRET_KEY": e2eSecretKey, "S3_BUCKET_NAME": "team-results",
	}}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, team, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing in the shell: the Secret is all it needs.
	r := tao(t, nil, append(stagedArgs(ns, "team", "--s3-secret", "team-s3"), "--", "python", "train.py")...)
	if r.code != 0 || r.stdout != "job.batch/team created\n" {
		t.Fatalf("submit: %s", r)
	}
	secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(secrets.Items) != 1 || secrets.Items[0].Name != "team-s3" {
		t.Fatalf("secrets = %v (%v), want team-s3 alone", secrets, err)
	}
	job, _ := client.BatchV1().Jobs(ns).Get(ctx, "team", metav1.GetOptions{})
	if job.Annotations["kubectl-tao.dev/s3-secret"] != "team-s3" || job.Annotations["kubectl-tao.dev/outputs"] != `["/results"]` {
		t.Fatalf("annotations = %v", job.Annotations)
	}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "SECRET_KEY" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "team-s3") {
			t.Fatalf("SECRET_KEY = %+v", e)
		}
	}
	poll(t, 60*time.Second, "the job to complete", jobFinished(ns, "team", batchv1.JobComplete))

	missing := tao(t, nil, append(stagedArgs(ns, "nope", "--s3-secret", "no-such-secret"), "--", "true")...)
	contains(t, missing, 3, "secret/no-such-secret not found in namespace "+ns)
	if _, err := client.BatchV1().Jobs(ns).Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Job was created for a missing --s3-secret: %v", err)
	}
}

func TestStagingRefusesBadInputAndCreatesNothing(t *testing.T) {
	ns := namespace(t)
	// No credentials in the shell.
	r := tao(t, nil, append(stagedArgs(ns, "nocreds"), "--", "true")...)
	contains(t, r, 2, "S3 staging needs ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME in the submitting shell")
	r = tao(t, []string{"ACCESS_KEY=" + e2eAccessKey}, append(stagedArgs(ns, "partial"), "--", "true")...)
	contains(t, r, 2, "S3 staging needs SECRET_KEY, S3_BUCKET_NAME")
	assertNoCredentials(t, "the error", r.stdout+r.stderr)
	// A bad s3 URL.
	contains(t, tao(t, s3Env, "submit", "badurl", "-n", ns, "--image", "img", "--stager-image", "s",
		"--input", "/data=s3://Bad_Bucket/x", "--", "true"), 2, "--input \"/data=s3://Bad_Bucket/x\"")
	contains(t, tao(t, s3Env, "submit", "badurl", "-n", ns, "--image", "img", "--stager-image", "s",
		"--input", "/data=gs://bucket/x", "--", "true"), 2, "is not an s3:// URL")
	// A development build names its stager image.
	contains(t, tao(t, s3Env, "submit", "noimage", "-n", ns, "--image", "img", "--output-path", "/r", "--", "true"), 2,
		"development build", "--stager-image")
	assertNoObjects(t, ns)
	secrets, err := client.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kubectl-tao"})
	if err != nil || len(secrets.Items) != 0 {
		t.Fatalf("secrets left: %v %v", secrets, err)
	}
}

func TestStagingRBACDeniedSecretRollsBack(t *testing.T) {
	ns := namespace(t)
	// The user may manage Jobs, not Secrets (nor list nodes: the capacity check is skipped).
	grantRole(t, ns, "jobs-only-user", manageJobs)
	assertSecretDeniedRollsBack(t, ns, "denied", "denied-s3", s3Env, append(stagedArgs(ns, "denied", "--as", "jobs-only-user"), "--", "true"),
		e2eAccessKey, e2eSecretKey)

	// --s3-secret when Secrets may not be read: a warning, and the job goes on.
	r := tao(t, nil, append(stagedArgs(ns, "unchecked", "--as", "jobs-only-user", "--s3-secret", "team-s3"), "--", "true")...)
	contains(t, r, 0, "Warning: --s3-secret team-s3 not checked: you may not read Secrets")
}

// assertSecretDeniedRollsBack submits (args, env) as a user who may not create Secrets: the
// error names the Secret and holds none of secrets, and the Job is rolled back.
func assertSecretDeniedRollsBack(t *testing.T, ns, job, secret string, env, args []string, secrets ...string) {
	t.Helper()
	r := tao(t, env, args...)
	contains(t, r, 6, "creating secret/"+secret, "forbidden")
	assertNoneOf(t, "the error", r.stdout+r.stderr, secrets...)
	assertRolledBack(t, ns, job, r)
}

// A user bound to exactly what `kubectl tao rbac` prints can submit staged jobs both ways.
func TestStagingLeastPrivilege(t *testing.T) {
	ns := namespace(t)
	user := leastPrivilegeUser(t, ns, "tao-s3-")
	r := tao(t, s3Env, append(stagedArgs(ns, "mine", "--as", user, "--wait"), "--", "true")...)
	contains(t, r, 0, "secret/mine-s3 created", "job.batch/mine Complete")
	r = tao(t, nil, append(stagedArgs(ns, "theirs", "--as", user, "--s3-secret", "mine-s3", "--wait"), "--", "true")...)
	contains(t, r, 0, "job.batch/theirs Complete")
	if strings.Contains(r.stderr, "Warning") {
		t.Fatalf("the --s3-secret check was not allowed: %s", r)
	}
}
