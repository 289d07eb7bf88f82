package submit_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

const (
	accessKey = "AKIAUNITTESTACCESS"
	secretKey = "unit/Test+Secret=Key"
)

// shellCreds is a submitting shell with every staging variable set.
var shellCreds = map[string]string{
	"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey, "S3_BUCKET_NAME": "results-bucket", "S3_ENDPOINT_URL": "http://127.0.0.1:7070",
}

func runEnv(t *testing.T, cluster cmdtest.Cmd, env map[string]string, args ...string) cmdtest.Result {
	t.Helper()
	cluster.Env, cluster.RandomName = env, "x7k2p"
	return cluster.Run(context.Background(), append([]string{"submit"}, args...)...)
}

// staged are the arguments of a staged submit, before "--".
func staged(name string, extra ...string) []string {
	return append([]string{name, "--image", "img", "--gpus", "0", "--stager-image", "registry.example/stager:dev",
		"--input", "/data=s3://datasets/coco/", "--output-path", "/results"}, extra...)
}

// noLeak fails if an S3 credential (or its base64) appears in text.
func noLeak(t *testing.T, what, text string) {
	t.Helper()
	holdsNone(t, what, text, accessKey, secretKey)
}

// holdsNone fails if one of secrets (or its base64) appears in text.
func holdsNone(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, v := range secrets {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(text, form) {
				t.Fatalf("a credential leaked into %s:\n%s", what, text)
			}
		}
	}
}

// noLeakInRequests checks every object sent to the API server except the Secret itself.
func noLeakInRequests(t *testing.T, c *fake.Clientset) {
	t.Helper()
	requestsHoldNone(t, c, accessKey, secretKey)
}

// requestsHoldNone checks every object sent to the API server but Secrets for secrets.
func requestsHoldNone(t *testing.T, c *fake.Clientset, secrets ...string) {
	t.Helper()
	for _, a := range c.Actions() {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || a.GetResource().Resource == "secrets" {
			continue
		}
		b, _ := json.Marshal(ca.GetObject())
		holdsNone(t, "a "+a.GetResource().Resource+" request", string(b), secrets...)
	}
}

func TestSubmitStagingCreatesAnOwnedSecret(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{NS: "ml", Client: c}, shellCreds, append(staged("train"), "--", "python train.py")...)
	if r.Code != 0 || r.Stdout != "job.batch/train created\nsecret/train-s3 created\n" || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,patch jobs" {
		t.Errorf("mutations = %s, want the Secret made while the Job is suspended", got)
	}
	ctx := context.Background()
	job, _ := c.BatchV1().Jobs("ml").Get(ctx, "train", metav1.GetOptions{})
	s, err := c.CoreV1().Secrets("ml").Get(ctx, "train-s3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refs := s.OwnerReferences
	if len(refs) != 1 || refs[0].UID != job.UID || !*refs[0].BlockOwnerDeletion || !*refs[0].Controller {
		t.Errorf("secret owner references = %+v, want the Job, blocking", refs)
	}
	if string(s.Data["ACCESS_KEY"]) != accessKey || string(s.Data["SECRET_KEY"]) != secretKey ||
		string(s.Data["S3_ENDPOINT_URL"]) != "http://127.0.0.1:7070" || !*s.Immutable {
		t.Errorf("secret = %+v", s)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for _, k := range []string{"ACCESS_KEY", "SECRET_KEY", "S3_BUCKET_NAME"} {
		if ref := env[k].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "train-s3" || env[k].Value != "" {
			t.Errorf("env %s = %+v, want a secretKeyRef", k, env[k])
		}
	}
	if job.Annotations["kubectl-tao.dev/s3-secret"] != "train-s3" || job.Annotations["kubectl-tao.dev/outputs"] != `["/results"]` {
		t.Errorf("annotations = %v", job.Annotations)
	}
	if ic := job.Spec.Template.Spec.InitContainers; len(ic) != 1 || ic[0].Image != "registry.example/stager:dev" {
		t.Errorf("init containers = %+v", ic)
	}
	noLeakInRequests(t, c)
	noLeak(t, "the output", r.Stdout+r.Stderr)
}

func TestSubmitStagingPrintsTheSecretRedacted(t *testing.T) {
	for _, args := range [][]string{
		{"--dry-run=client", "-o", "yaml"},
		{"--dry-run=client", "-o", "json"},
		{"--dry-run=server", "-o", "yaml"},
		{"-o", "json"},
		{"-o", "jsonpath={.items[1].data}{.items[1].stringData}"},
	} {
		c := newClient()
		f := cmdtest.Cmd{Client: c}
		if args[0] == "--dry-run=client" {
			f = cmdtest.Cmd{ClientErr: errors.New("no cluster for a client dry run")}
		}
		r := runEnv(t, f, shellCreds, append(staged("train", args...), "--", "true")...)
		if r.Code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
		noLeak(t, strings.Join(args, " "), r.Stdout+r.Stderr)
		if !strings.Contains(r.Stdout, "REDACTED") || !strings.Contains(r.Stdout, "SECRET_KEY") {
			t.Errorf("%v: want the Secret's keys shown, values REDACTED:\n%s", args, r.Stdout)
		}
	}
}

func TestSubmitStagingMissingCredentialsCreateNothing(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, map[string]string{"SECRET_KEY": secretKey}, append(staged("train"), "--", "true")...)
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "S3 staging needs ACCESS_KEY, S3_BUCKET_NAME in the submitting shell") {
		t.Fatalf("got %+v", r)
	}
	if len(c.Actions()) != 0 {
		t.Errorf("actions = %v, want none", c.Actions())
	}
	noLeak(t, "the output", r.Stdout+r.Stderr)
}

func TestSubmitStagingUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"j", "--image", "img", "--stager-image", "s", "--input", "/data=http://x/y", "--", "true"}, `"http://x/y" is not an s3:// URL`},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--input", "data=s3://bucket/x", "--", "true"}, "must be absolute"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--input", "/data", "--", "true"}, "want CONTAINER_PATH=s3://BUCKET/KEY"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--input", "/a=s3://bucket/x", "--input", "/a/b=s3://bucket/y", "--", "true"}, "are nested"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--output-path", "/r//s", "--", "true"}, "is not clean"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--output-path", "/r/../s/", "--", "true"}, `may not contain ".."`},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--output-path", "r/", "--", "true"}, "must be absolute"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--output-path", "/.kubectl-tao/logs", "--", "true"}, "under /.kubectl-tao"},
		{[]string{"j", "--image", "img", "--s3-secret", "team", "--", "true"}, "--s3-secret only applies with --input, --output-path, --checkpoint-dir or --workdir"},
		{[]string{"j", "--image", "img", "--checkpoint-keep", "3", "--", "true"}, "--checkpoint-keep only applies with --checkpoint-dir"},
		{[]string{"j", "--image", "img", "--checkpoint-pattern", "*.bin", "--", "true"}, "--checkpoint-pattern only applies with --checkpoint-dir"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "ckpt", "--", "true"}, "--checkpoint-dir: "},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--checkpoint-keep", "0", "--", "true"}, "invalid --checkpoint-keep 0"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--checkpoint-pattern", "", "--", "true"}, "--checkpoint-pattern: empty pattern"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--checkpoint-pattern", "run/ckpt_*/", "--", "true"},
			`--checkpoint-pattern "run/ckpt_*/": a pattern matches a file's name, or a directory's with one "/" at its end (ckpt_*/), never a path`},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--checkpoint-pattern", "/", "--", "true"}, "never a path"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--checkpoint-pattern", "ckpt_[/", "--", "true"}, "syntax error"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--env", "TAO_ATTEMPT=3", "--", "true"}, `invalid --env "TAO_ATTEMPT"`},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--checkpoint-dir", "/p/c", "--volume", "pvc:/p", "--s3-secret", "x", "--", "true"}, "--s3-secret: --checkpoint-dir /p/c is on a --volume"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--workdir", codeDir(t), "--checkpoint-dir", "/workspace/ckpt", "--", "true"},
			"--checkpoint-dir /workspace/ckpt and --workdir-mount /workspace overlap"},
		{[]string{"j", "--image", "img", "--termination-grace-period", "0s", "--", "true"}, "invalid --termination-grace-period 0s"},
		// Before the stager image is looked for: the reason is the timeout's.
		{[]string{"j", "--image", "img", "--hang-timeout", "10s", "--", "true"}, "invalid --hang-timeout 10s: must be 30s or more (a rendezvous or a first batch can take that long without a line)"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--hang-timeout", "45500ms", "--", "true"}, "invalid --hang-timeout 45.5s: must be whole seconds"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--hang-timeout", "-1m", "--", "true"}, "invalid --hang-timeout -1m0s"},
		{[]string{"j", "--image", "img", "--stager-image", "s", "--nodes", "2", "--master-port", "65535", "--hang-timeout", "1m", "--", "true"}, "the supervisors use the next port"},
		{[]string{"j", "--image", "img", "--hang-timeout", "1m", "--", "true"}, "development build (v0.0.0-dev) with no published stager image"},
		{[]string{"j", "--image", "img", "--status-file", "results/status.json", "--", "true"}, `--status-file "results/status.json": must be an absolute, clean path`},
		{[]string{"j", "--image", "img", "--status-file", "/results//status.json", "--", "true"}, "must be an absolute, clean path"},
		{[]string{"j", "--image", "img", "--status-file", "/results/", "--", "true"}, "must be an absolute, clean path"},
		{[]string{"j", "--image", "img", "--checkpoint-dir", "/ckpt", "--", "true"}, "development build (v0.0.0-dev) with no published stager image, which --input, --output-path, --checkpoint-dir"},
		{[]string{"j", "--image", "img", "--output-path", "/r", "--", "true"}, "development build (v0.0.0-dev) with no published stager image"},
	} {
		c := newClient()
		r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, tc.args...)
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: got %+v, want exit 2 and %q", tc.args, r, tc.want)
		}
		if len(c.Actions()) != 0 {
			t.Errorf("%v: actions %v, want none", tc.args, c.Actions())
		}
	}
}

// --checkpoint-dir needs the S3 credentials --output-path needs, refused the same way, with
// nothing created.
func TestSubmitCheckpointsMissingCredentialsCreateNothing(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, map[string]string{"SECRET_KEY": secretKey},
		"train", "--image", "img", "--gpus", "0", "--stager-image", "s", "--checkpoint-dir", "/ckpt", "--", "true")
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "S3 staging needs ACCESS_KEY, S3_BUCKET_NAME in the submitting shell") {
		t.Fatalf("got %+v", r)
	}
	if len(c.Actions()) != 0 {
		t.Errorf("actions = %v, want none", c.Actions())
	}
	noLeak(t, "the output", r.Stdout+r.Stderr)
}

// A job with --checkpoint-dir runs `stage run` on every rank with the checkpoint settings, its
// pods' grace period as asked, and the credentials by reference only.
func TestSubmitCheckpoints(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, "ddp", "--image", "img", "--gpus", "0", "--nodes", "2", "--stager-image", "s",
		"--checkpoint-dir", "/ckpt/", "--checkpoint-keep", "4", "--checkpoint-pattern", "*.pt", "--checkpoint-pattern", "step-*", "--termination-grace-period", "3m",
		"--", "python", "train.py")
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, err := c.BatchV1().Jobs("default").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{
		s3layout.EnvStageCheckpointDir: "/ckpt", s3layout.EnvStageCheckpointKeep: "4",
		s3layout.EnvStageCheckpointPatterns: "*.pt\nstep-*", s3layout.EnvStageGracePeriod: "180",
	} {
		if env[k] != want {
			t.Errorf("$%s = %q, want %q", k, env[k], want)
		}
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 180 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 180", g)
	}
	if c := pod.Containers[0].Command; len(c) < 4 || c[0] != s3layout.StagerBinary || c[1] != "stage" || c[2] != "run" || c[3] != "--" {
		t.Errorf("the command does not run under the supervisor: %q", c)
	}
	noLeakInRequests(t, c)
	if strings.Contains(r.Stderr, "Warning") {
		t.Errorf("patterns that name checkpoints only, warned about:\n%s", r.Stderr)
	}
}

// A --checkpoint-pattern so broad that it takes a framework's config, markers and logs for
// checkpoints gets a warning naming what it would take; the job is still submitted.
func TestSubmitWarnsOfABroadCheckpointPattern(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		want     string
	}{
		{[]string{"*"}, "Warning: --checkpoint-pattern * also takes config.json, trainer_state.json, training_args.bin, latest, "},
		{[]string{"*.pt", "*.json"}, "Warning: --checkpoint-pattern *.pt *.json also takes config.json, trainer_state.json, status.json, tokenizer.json for checkpoints"},
	} {
		args := []string{"wide", "--image", "img", "--gpus", "0", "--stager-image", "s", "--checkpoint-dir", "/ckpt"}
		for _, p := range tc.patterns {
			args = append(args, "--checkpoint-pattern", p)
		}
		r := runEnv(t, cmdtest.Cmd{Client: newClient()}, shellCreds, append(args, "--", "python", "train.py")...)
		if r.Code != 0 || !strings.Contains(r.Stderr, tc.want) || strings.Count(r.Stderr, "Warning") != 1 {
			t.Errorf("%q: got %+v; want a warning %q", tc.patterns, r, tc.want)
		}
	}
}

// A --checkpoint-dir on a --volume needs no S3: no credentials, no Secret, the wrapper alone
// (to number the attempts and name the checkpoint to resume from).
func TestSubmitCheckpointsOnAVolume(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, nil, "pvc", "--image", "img", "--gpus", "0", "--stager-image", "s",
		"--volume", "ckpts:/pvc", "--checkpoint-dir", "/pvc/run1", "--", "python", "train.py")
	if r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, err := c.BatchV1().Jobs("default").Get(context.Background(), "pvc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[s3layout.EnvStageCheckpointOnVolume] != "1" || env[s3layout.EnvStageCheckpointDir] != "/pvc/run1" {
		t.Errorf("env %v", env)
	}
	if _, ok := env[s3layout.EnvAccessKey]; ok {
		t.Error("the pod gets S3 credentials it does not need")
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "secrets" {
			t.Error("a Secret was created")
		}
	}
	if got := job.Annotations[s3layout.AnnotationCheckpoints]; got != `{"dir":"/pvc/run1","onVolume":true}` {
		t.Errorf("annotation %s", got)
	}
}

// The SDK writes outputs=['/results/']: the same directory as /results, down to the annotation
// later commands read and the paths the stager uploads.
func TestSubmitOutputPathTrailingSlash(t *testing.T) {
	jobOf := func(path string) *batchv1.Job {
		c := newClient()
		args := []string{"train", "--image", "img", "--gpus", "0", "--stager-image", "s", "--output-path", path, "--", "true"}
		if r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, args...); r.Code != 0 {
			t.Fatalf("--output-path %s: %+v", path, r)
		}
		job, err := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	plain, slash := jobOf("/results"), jobOf("/results/")
	if got := slash.Annotations[s3layout.AnnotationOutputs]; got != `["/results"]` {
		t.Errorf("outputs annotation %s", got)
	}
	a, _ := json.Marshal(plain.Spec.Template)
	b, _ := json.Marshal(slash.Spec.Template)
	if string(a) != string(b) {
		t.Errorf("/results/ made another pod template than /results:\n%s\n%s", a, b)
	}
}

func TestSubmitS3SecretIsReferencedNotCreated(t *testing.T) {
	c := newClient(fixture.Secret("default", "team-s3", shellCreds))
	// The shell's credentials are ignored with --s3-secret: nothing is copied.
	r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, append(staged("train", "--s3-secret", "team-s3"), "--", "true")...)
	if r.Code != 0 || r.Stdout != "job.batch/train created\n" || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,patch jobs" {
		t.Errorf("mutations = %s, want no Secret created", got)
	}
	gets := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "secrets" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d GETs of the Secret, want 1", gets)
	}
	job, _ := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{})
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "SECRET_KEY" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "team-s3") {
			t.Errorf("SECRET_KEY = %+v, want a reference to team-s3", e)
		}
	}
	noLeakInRequests(t, c)
}

func TestSubmitS3SecretProblems(t *testing.T) {
	forbidden := func(c *fake.Clientset) {
		c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "team-s3", errors.New("RBAC: denied"))
		})
	}
	for _, tc := range []struct {
		name     string
		objs     []runtime.Object
		react    func(*fake.Clientset)
		code     int
		want     string
		creates  bool
		warnings string
	}{
		{name: "missing", code: int(exitcode.NotFound), want: "--s3-secret: secret/team-s3 not found in namespace default"},
		{name: "lacks keys", objs: []runtime.Object{fixture.Secret("default", "team-s3", map[string]string{"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey})},
			code: int(exitcode.Error), want: "S3 staging needs S3_BUCKET_NAME in secret/team-s3"},
		{name: "bad endpoint", objs: []runtime.Object{fixture.Secret("default", "team-s3", map[string]string{"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey, "S3_BUCKET_NAME": "bkt", "S3_ENDPOINT_URL": "ftp://" + secretKey})},
			code: int(exitcode.Error), want: "S3_ENDPOINT_URL must be an http:// or https:// URL"},
		{name: "forbidden", react: forbidden, code: 0, creates: true, warnings: "Warning: --s3-secret team-s3 not checked: you may not read Secrets in namespace default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(tc.objs...)
			if tc.react != nil {
				tc.react(c)
			}
			r := runEnv(t, cmdtest.Cmd{Client: c}, nil, append(staged("train", "--s3-secret", "team-s3"), "--", "true")...)
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.want) || !strings.Contains(r.Stderr, tc.warnings) {
				t.Fatalf("got %+v, want exit %d and %q", r, tc.code, tc.want+tc.warnings)
			}
			if created := len(mutations(c)) > 0; created != tc.creates {
				t.Errorf("mutations = %v", mutations(c))
			}
			noLeak(t, "the output", r.Stdout+r.Stderr)
		})
	}
}

func TestSubmitFailedSecretCreateLeavesNothing(t *testing.T) {
	c := newClient()
	c.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		// An error that quotes what was sent must not show it.
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "train-s3", errors.New("denied for "+secretKey))
	})
	r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, append(staged("train"), "--", "true")...)
	if r.Code != int(exitcode.Forbidden) || !strings.Contains(r.Stderr, "creating secret/train-s3") || r.Stdout != "" {
		t.Fatalf("got %+v", r)
	}
	noLeak(t, "the error", r.Stderr)
	if _, err := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Job survived a failed submit: %v", err)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,delete jobs" {
		t.Errorf("mutations = %s", got)
	}
}

func TestSubmitRollbackDeletesTheSecret(t *testing.T) {
	c := newClient()
	c.PrependReactor("patch", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("resume failed")
	})
	r := runEnv(t, cmdtest.Cmd{Client: c}, shellCreds, append(staged("train"), "--", "true")...)
	if r.Code == 0 {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,patch jobs,delete secrets,delete jobs" {
		t.Errorf("mutations = %s, want the Secret and the Job deleted again", got)
	}
	if _, err := c.CoreV1().Secrets("default").Get(context.Background(), "train-s3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret survived: %v", err)
	}
}

// Every Job carries the SDK's TAO_JOB_ID, and TAO_JOB_UID from the downward API.
func TestSubmitSetsJobIdentity(t *testing.T) {
	c := newClient()
	if r := run(t, cmdtest.Cmd{Client: c}, "plain", "--image", "img", "--gpus", "0", "--", "true"); r.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	job, _ := c.BatchV1().Jobs("default").Get(context.Background(), "plain", metav1.GetOptions{})
	env := job.Spec.Template.Spec.Containers[0].Env
	if len(env) < 2 || env[0].Name != "TAO_JOB_ID" || env[0].Value != "plain" || env[1].Name != "TAO_JOB_UID" ||
		env[1].ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/controller-uid']" {
		t.Errorf("env = %+v", env)
	}
}
