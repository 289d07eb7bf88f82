package deleteartifacts_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/deleteartifacts"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

const (
	accessKey = "AKIAEXAMPLEKEY"
	secretKey = "wJalrXUtnFEMI-very-secret"
)

type env struct {
	t      *testing.T
	s3     *s3fake.Server
	client *fake.Clientset
}

func setup(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t, s3: s3fake.Start(t, s3fake.Options{Bucket: "results-bucket", AccessKey: accessKey, SecretKey: secretKey}), client: fake.NewClientset(objs...)}
	for _, k := range []string{
		"results/train/uid-1/results/model.pth", "results/train/uid-1/results/logs/a.log",
		"results/train/uid-0/results/model.pth", // an earlier run of the same name
		"results/train-2/uid-1/x",               // another job
	} {
		e.s3.Put(k, "0123456789")
	}
	return e
}

func (e *env) secret(name string) *corev1.Secret {
	return fixture.Secret("default", name, e.s3.Env())
}

func (e *env) run(getenv map[string]string, args ...string) (int, string, string) {
	r := cmdtest.Cmd{Client: e.client, Env: getenv}.Run(context.Background(), args...)
	if strings.Contains(r.Stdout+r.Stderr, secretKey) {
		e.t.Errorf("the secret key was printed:\n%s\n%s", r.Stdout, r.Stderr)
	}
	return r.Code, r.Stdout, r.Stderr
}

func TestDeletesTheJobThenOnlyItsPrefix(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobComplete, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	if _, err := e.client.CoreV1().Secrets("default").Create(context.Background(), e.secret("train-s3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(nil, "delete-artifacts", "train")
	if code != 0 || out != "job.batch/train deleted; 2 objects (20 B) removed from s3://results-bucket/results/train/uid-1/\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	if got := strings.Join(e.s3.Keys(""), " "); got != "results/train-2/uid-1/x results/train/uid-0/results/model.pth" {
		t.Errorf("left %s", got)
	}
	if _, err := e.client.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{}); err == nil {
		t.Error("the Job is still there")
	}
}

func TestDryRunRemovesNothing(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobFailed, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	if _, err := e.client.CoreV1().Secrets("default").Create(context.Background(), e.secret("train-s3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.s3.Keys("")
	code, out, _ := e.run(nil, "delete-artifacts", "train", "--dry-run")
	want := "s3://results-bucket/results/train/uid-1/results/logs/a.log (10 B)\n" +
		"s3://results-bucket/results/train/uid-1/results/model.pth (10 B)\n" +
		"job.batch/train deleted; 2 objects (20 B) removed from s3://results-bucket/results/train/uid-1/ (dry run)\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout:\n%s", code, out)
	}
	if len(e.s3.Keys("")) != len(before) {
		t.Error("a dry run removed objects")
	}
	if _, err := e.client.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{}); err != nil {
		t.Errorf("a dry run deleted the Job: %v", err)
	}
	code, out, _ = e.run(nil, "delete-artifacts", "train", "--dry-run", "-o", "json")
	var r deleteartifacts.Report
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Objects != 2 || r.Bytes != 20 || !r.DryRun || len(r.Keys) != 2 || r.UID != "uid-1" {
		t.Fatalf("exit %d, json %s", code, out)
	}
}

func TestShellCredentialsNeedNoSecret(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobComplete, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	env := e.s3.Env()
	code, out, errOut := e.run(env, "delete-artifacts", "job/train")
	if code != 0 || !strings.Contains(out, "2 objects (20 B) removed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, a := range e.client.Actions() {
		if a.GetResource().Resource == "secrets" {
			t.Errorf("read a Secret although the shell had credentials: %v", a)
		}
	}
}

func TestRefusals(t *testing.T) {
	e := setup(t,
		fixture.Job("running").Namespace("default").UID("uid-1").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("running")).Obj(),
		fixture.Job("plain").Namespace("default").UID("uid-2").Condition(batchv1.JobComplete, "", "").Obj(),
		fixture.Job("orphan").Namespace("default").UID("uid-3").Condition(batchv1.JobComplete, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("orphan")).Obj(),
		fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobComplete, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj(),
	)
	before := len(e.s3.Keys(""))
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"running"}, nil, 1, "job.batch/running is Pending, not finished"},
		{[]string{"plain"}, nil, 1, "job.batch/plain was not submitted with --output"},
		{[]string{"orphan"}, nil, 3, "secret/orphan-s3 with the S3 credentials of job.batch/orphan is gone: set ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, S3_ENDPOINT_URL in the shell"},
		{[]string{"missing"}, nil, 3, "job.batch/missing not found"},
		{[]string{"train"}, map[string]string{"ACCESS_KEY": accessKey}, 2, "SECRET_KEY, S3_BUCKET_NAME not set in the environment"},
		{[]string{"train", "-o", "bogus"}, nil, 2, `unable to match a printer suitable for the output format "bogus"`},
	} {
		code, out, errOut := e.run(tc.env, append([]string{"delete-artifacts"}, tc.args...)...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	if len(e.s3.Keys("")) != before {
		t.Error("a refused run removed objects")
	}
	jobs, _ := e.client.BatchV1().Jobs("default").List(context.Background(), metav1.ListOptions{})
	if len(jobs.Items) != 4 {
		t.Errorf("%d jobs left; a refused run deleted one", len(jobs.Items))
	}
}

// Wrong credentials are found by the listing, before the Job (and its Secret) is deleted. The
// fake S3 does not check signatures, so the bucket is missing instead: the same path.
func TestS3FailureKeepsTheJob(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobComplete, "", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	env := e.s3.Env()
	env["S3_BUCKET_NAME"] = "no-such-bucket"
	code, _, errOut := e.run(env, "delete-artifacts", "train")
	if code != 3 || !strings.Contains(errOut, "s3://no-such-bucket/results/train/uid-1/ (nothing was deleted)") {
		t.Fatalf("exit %d, %s", code, errOut)
	}
	if _, err := e.client.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{}); err != nil {
		t.Errorf("the Job was deleted: %v", err)
	}
}

// A finished Job whose only object in S3 is its --workdir snapshot: delete-artifacts removes it
// like any other object of the run.
func TestDeletesARunWithOnlyItsWorkdirSnapshot(t *testing.T) {
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	e := setup(t, fixture.Job("code").Namespace("default").UID("uid-7").Condition(batchv1.JobComplete, "", "").
		Annotation(s3layout.AnnotationWorkdirSHA256, sum).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("code")).Obj())
	e.s3.Put("results/code/uid-7/.kubectl-tao/workdir.tar.zst", "zstd")
	if _, err := e.client.CoreV1().Secrets("default").Create(context.Background(), e.secret("code-s3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(nil, "delete-artifacts", "code")
	if code != 0 || out != "job.batch/code deleted; 1 object (4 B) removed from s3://results-bucket/results/code/uid-7/\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	for _, k := range e.s3.Keys("") {
		if strings.HasPrefix(k, "results/code/") {
			t.Errorf("left %s", k)
		}
	}
}

// The log archive, every attempt of every rank, is under the run's prefix: delete-artifacts
// removes it with the outputs, and leaves an earlier run's archive alone.
func TestDeletesTheLogArchive(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobFailed, "BackoffLimitExceeded", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	if _, err := e.client.CoreV1().Secrets("default").Create(context.Background(), e.secret("train-s3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run, _ := s3layout.ResultsPrefix("train", "uid-1")
	older, _ := s3layout.ResultsPrefix("train", "uid-0")
	for _, k := range []string{
		s3layout.LogArchiveKey(run, 0, "train-0-first"), s3layout.LogArchiveKey(run, 0, "train-0-retry"),
		s3layout.LogArchiveKey(run, 1, ""), s3layout.LogArchiveKey(older, 0, "train-0-old"),
	} {
		e.s3.Put(k, "0123456789")
	}
	code, out, errOut := e.run(nil, "delete-artifacts", "train")
	if code != 0 || out != "job.batch/train deleted; 5 objects (50 B) removed from s3://results-bucket/results/train/uid-1/\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	want := "results/train-2/uid-1/x " + s3layout.LogArchiveKey(older, 0, "train-0-old") + " results/train/uid-0/results/model.pth"
	if got := strings.Join(e.s3.Keys(""), " "); got != want {
		t.Errorf("left %s\nwant %s", got, want)
	}
}

// A job that kept only checkpoints (--checkpoint-dir, no --output-path) has results in S3:
// delete-artifacts takes it and removes them with the rest of its run.
func TestDeletesTheCheckpoints(t *testing.T) {
	e := setup(t, fixture.Job("train").Namespace("default").UID("uid-1").Condition(batchv1.JobFailed, "", "").
		Annotation(s3layout.AnnotationCheckpoints, `{"dir":"/ckpt"}`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj())
	e.s3.Put(s3layout.CheckpointManifestKey("results/train/uid-1/", 0), `{"version":1,"rank":0,"files":[]}`)
	e.s3.Put(s3layout.CheckpointFilesPrefix("results/train/uid-1/", 0)+"step-4.pt", "0123456789")
	code, out, errOut := e.run(e.s3.Env(), "delete-artifacts", "train")
	if code != 0 || !strings.HasPrefix(out, "job.batch/train deleted; 4 objects") {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	if keys := e.s3.Keys("results/train/uid-1/"); len(keys) != 0 {
		t.Errorf("left %q", keys)
	}
}
