package results_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/results"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

const (
	accessKey = "AKIAEXAMPLEKEY"
	secretKey = "wJalrXUtnFEMI-very-secret"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type env struct {
	t      *testing.T
	url    string
	client *fake.Clientset
}

// setup starts an S3 server whose clock advances a minute per object, holding two runs of
// "train" (uid-0 older than uid-1), a run of "solo", and another job's run.
func setup(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	srv := s3fake.Start(t, s3fake.Options{Bucket: "results-bucket", AccessKey: accessKey, SecretKey: secretKey, Now: t0})
	e := &env{t: t, url: srv.Endpoint, client: fake.NewClientset(objs...)}
	for _, k := range []string{
		"results/train/uid-0/results/model.pth",
		"results/train/uid-1/results/model.pth",
		"results/train/uid-1/results/logs/a.log",
		"results/train/uid-1/.kubectl-tao/logs/rank-0.log",
		"results/train-2/uid-2/x",
		"results/solo/uid-9/out.txt",
	} {
		srv.Clock.Advance(time.Minute)
		srv.Put(k, "0123456789")
	}
	return e
}

func (e *env) shell() map[string]string {
	return map[string]string{"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey, "S3_BUCKET_NAME": "results-bucket", "S3_ENDPOINT_URL": e.url}
}

func (e *env) createSecret(name string) {
	sec := fixture.Secret("default", name, map[string]string{
		"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey, "S3_BUCKET_NAME": "results-bucket", "S3_ENDPOINT_URL": e.url,
	})
	if _, err := e.client.CoreV1().Secrets("default").Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) run(env map[string]string, args ...string) cmdtest.Result {
	r := cmdtest.Cmd{Client: e.client, Env: env}.Run(context.Background(), append([]string{"results"}, args...)...)
	if strings.Contains(r.Stdout+r.Stderr, secretKey) {
		e.t.Errorf("the secret key was printed:\n%s\n%s", r.Stdout, r.Stderr)
	}
	return r
}

func stagedJob(name, uid string) *batchv1.Job {
	return fixture.Job(name).Namespace("default").UID(uid).Condition(batchv1.JobComplete, "", "").
		Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName(name)).Obj()
}

func TestListsTheJobsRunWithItsSecret(t *testing.T) {
	e := setup(t, stagedJob("train", "uid-1"))
	e.createSecret("train-s3")
	r := e.run(nil, "train")
	want := "KEY                            SIZE   LAST-MODIFIED\n" +
		".kubectl-tao/logs/rank-0.log   10 B   2026-11-30T09:04:00Z\n" +
		"results/logs/a.log             10 B   2026-11-30T09:03:00Z\n" +
		"results/model.pth              10 B   2026-11-30T09:02:00Z\n"
	if r.Code != 0 || r.Stdout != want || r.Stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.Code, r.Stdout, want, r.Stderr)
	}

	r = e.run(nil, "job/train", "-o", "json")
	var l results.Listing
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &l) != nil {
		t.Fatalf("exit %d, %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if l.UID != "uid-1" || l.Prefix != "s3://results-bucket/results/train/uid-1/" || len(l.Objects) != 3 ||
		l.Objects[2].Key != "results/model.pth" || l.Objects[2].Size != 10 || !l.Objects[2].LastModified.Equal(t0.Add(2*time.Minute)) || l.Objects[2].ETag == "" {
		t.Errorf("listing %+v", l)
	}
	r = e.run(nil, "train", "-o", "jsonpath={.objects[*].key}")
	if r.Code != 0 || r.Stdout != ".kubectl-tao/logs/rank-0.log results/logs/a.log results/model.pth" {
		t.Errorf("jsonpath: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	r = e.run(nil, "train", "-o", "wide")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "KEY ") || !strings.Contains(strings.Split(r.Stdout, "\n")[0], "ETAG") {
		t.Errorf("wide: exit %d\n%s", r.Code, r.Stdout)
	}
}

func TestShellCredentialsReadNoSecret(t *testing.T) {
	e := setup(t, stagedJob("train", "uid-1"))
	r := e.run(e.shell(), "train", "-o", "jsonpath={.uid}")
	if r.Code != 0 || r.Stdout != "uid-1" {
		t.Fatalf("exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	for _, a := range e.client.Actions() {
		if a.GetResource().Resource == "secrets" {
			t.Errorf("read a Secret although the shell had credentials: %v", a)
		}
	}
}

func TestJobGone(t *testing.T) {
	e := setup(t)
	e.createSecret("team-s3")

	// One run: it is the one.
	r := e.run(nil, "solo", "--s3-secret", "team-s3", "-o", "jsonpath={.uid} {.objects[0].key}")
	if r.Code != 0 || r.Stdout != "uid-9 out.txt" {
		t.Errorf("solo: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}

	// Several runs and no --uid: an error that lists them, oldest first.
	r = e.run(e.shell(), "train")
	want := "error: job.batch/train is gone and has 2 runs under s3://results-bucket/results/train/: pick one with --uid:\n" +
		"  --uid uid-0  (1 object, 10 B, last written 2026-11-30T09:01:00Z)\n" +
		"  --uid uid-1  (3 objects, 30 B, last written 2026-11-30T09:04:00Z)\n"
	if r.Code != 2 || r.Stdout != "" || !strings.HasPrefix(r.Stderr, want) {
		t.Errorf("several runs: exit %d, stdout %q, stderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}

	r = e.run(e.shell(), "train", "--uid", "uid-0")
	if r.Code != 0 || !strings.Contains(r.Stdout, "results/model.pth") || strings.Count(r.Stdout, "\n") != 2 {
		t.Errorf("--uid: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	r = e.run(e.shell(), "train", "--all-runs")
	want = "UID     OBJECTS   SIZE   LAST-MODIFIED\n" +
		"uid-0   1         10 B   2026-11-30T09:01:00Z\n" +
		"uid-1   3         30 B   2026-11-30T09:04:00Z\n"
	if r.Code != 0 || r.Stdout != want {
		t.Errorf("--all-runs: exit %d\n%s\nwant:\n%s%s", r.Code, r.Stdout, want, r.Stderr)
	}
	r = e.run(e.shell(), "train", "--all-runs", "-o", "json")
	var runs results.RunList
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &runs) != nil || len(runs.Runs) != 2 || runs.Runs[1].UID != "uid-1" || runs.Runs[1].Bytes != 30 {
		t.Errorf("--all-runs -o json: exit %d %s", r.Code, r.Stdout)
	}
	r = e.run(e.shell(), "nothing", "--all-runs", "-o", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"runs": []`) || !strings.Contains(r.Stderr, "No runs under s3://results-bucket/results/nothing/") {
		t.Errorf("--all-runs of an unknown name: exit %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
}

func TestRefusals(t *testing.T) {
	e := setup(t,
		fixture.Job("plain").Namespace("default").UID("uid-5").Condition(batchv1.JobComplete, "", "").Obj(),
		stagedJob("orphan", "uid-6"),
		stagedJob("running", "uid-7"),
	)
	shell := e.shell()
	wrongKey := e.shell()
	wrongKey["SECRET_KEY"] = "not-it"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"plain"}, shell, 1, "job.batch/plain was not submitted with --output-path"},
		{[]string{"orphan"}, nil, 3, "secret/orphan-s3 with the S3 credentials of job.batch/orphan is gone: set ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, S3_ENDPOINT_URL in the shell"},
		{[]string{"gone"}, nil, 2, "job.batch/gone is gone, and its S3 Secret with it: set ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, S3_ENDPOINT_URL in the shell, or name a Secret with --s3-secret"},
		{[]string{"gone", "--s3-secret", "nope"}, nil, 3, `--s3-secret: secret "nope" not found in namespace "default"`},
		{[]string{"gone"}, shell, 3, "job.batch/gone not found, and it has no results under s3://results-bucket/results/gone/"},
		{[]string{"train", "--uid", "uid-404"}, shell, 3, "no results under s3://results-bucket/results/train/uid-404/"},
		{[]string{"train", "--uid", "a/b"}, shell, 2, `--uid: invalid job UID "a/b"`},
		{[]string{"train", "--uid", "uid-1", "--all-runs"}, shell, 2, "--uid and --all-runs do not go together"},
		{[]string{"train", "-o", "name"}, shell, 2, `unable to match a printer suitable for the output format "name"`},
		{[]string{"train", "--uid", "uid-1"}, map[string]string{"ACCESS_KEY": accessKey}, 2, "SECRET_KEY, S3_BUCKET_NAME not set in the environment"},
		{[]string{"train", "--uid", "uid-1"}, map[string]string{"ACCESS_KEY": accessKey, "SECRET_KEY": secretKey, "S3_BUCKET_NAME": "no-such-bucket", "S3_ENDPOINT_URL": e.url}, 3, "the bucket does not exist"},
		{[]string{}, shell, 2, "expected one JOB"},
	} {
		r := e.run(tc.env, tc.args...)
		if r.Code != tc.code || r.Stdout != "" || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, r.Code, r.Stdout, r.Stderr, tc.code, tc.want)
		}
	}
	// The Job's own run that has written nothing yet is empty, not missing.
	r := e.run(shell, "running")
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "No objects under s3://results-bucket/results/running/uid-7/ yet.\n" {
		t.Errorf("empty own run: exit %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

func TestDownload(t *testing.T) {
	e := setup(t, stagedJob("train", "uid-1"))
	dir := filepath.Join(t.TempDir(), "out")
	r := e.run(e.shell(), "train", "--download", dir)
	if r.Code != 0 || r.Stderr != "" || r.Stdout != "3 objects (30 B) downloaded from s3://results-bucket/results/train/uid-1/ to "+dir+"; 0 already complete\n" {
		t.Fatalf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, rel := range []string{"results/model.pth", "results/logs/a.log", ".kubectl-tao/logs/rank-0.log"} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil || string(b) != "0123456789" {
			t.Errorf("%s: %q %v", rel, b, err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "results", "model.pth"))
	if err != nil || !fi.ModTime().Equal(t0.Add(2*time.Minute)) {
		t.Errorf("model.pth's time is not the object's: %v %v", fi, err)
	}
	r = e.run(e.shell(), "train", "--download", dir, "-o", "json")
	var f results.Fetched
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &f) != nil || f.Downloaded != 0 || f.Skipped != 3 || f.Dir != dir || f.UID != "uid-1" {
		t.Errorf("second run: exit %d %s %s", r.Code, r.Stdout, r.Stderr)
	}

	only := filepath.Join(t.TempDir(), "pth")
	r = e.run(e.shell(), "train", "--download", only, "--include", "*.pth")
	entries, _ := os.ReadDir(filepath.Join(only, "results"))
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "1 object (10 B) downloaded") || len(entries) != 1 || entries[0].Name() != "model.pth" {
		t.Errorf("--include: exit %d %s %v", r.Code, r.Stdout, entries)
	}
	if _, err := os.Stat(filepath.Join(only, ".kubectl-tao")); !os.IsNotExist(err) {
		t.Errorf("--include fetched more: %v", err)
	}
	r = e.run(e.shell(), "train", "--include", "results/*")
	if r.Code != 0 || strings.Count(r.Stdout, "\n") != 2 || !strings.Contains(r.Stdout, "results/model.pth") {
		t.Errorf("--include listing: %d\n%s", r.Code, r.Stdout)
	}
}

func TestDownloadRefusals(t *testing.T) {
	e := setup(t, stagedJob("train", "uid-1"))
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--download", ""}, "--download needs a directory"},
		{[]string{"train", "--all-runs", "--download", dir}, "--download and --include apply to one run"},
		{[]string{"train", "--include", "[a-"}, `invalid --include "[a-"`},
	} {
		r := e.run(e.shell(), tc.args...)
		if r.Code != 2 || r.Stdout != "" || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: exit %d %q %q", tc.args, r.Code, r.Stdout, r.Stderr)
		}
	}
	wrong := e.shell()
	wrong["S3_BUCKET_NAME"] = "no-such-bucket"
	target := filepath.Join(dir, "never")
	if r := e.run(wrong, "train", "--download", target); r.Code != 3 {
		t.Errorf("missing bucket: exit %d %s", r.Code, r.Stderr)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a failed listing made %s: %v", target, err)
	}
}

// A Job submitted with a --workdir that went through S3, and no --output-path, has its code
// snapshot under the prefix: results lists it like any other object.
func TestListsARunWithOnlyItsWorkdirSnapshot(t *testing.T) {
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	e := setup(t,
		fixture.Job("solo").Namespace("default").UID("uid-9").Condition(batchv1.JobComplete, "", "").
			Annotation(s3layout.AnnotationWorkdirSHA256, sum).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("solo")).Obj(),
		fixture.Job("cm").Namespace("default").UID("uid-8").Condition(batchv1.JobComplete, "", "").
			Annotation(s3layout.AnnotationWorkdirSHA256, sum).Obj(),
	)
	e.createSecret("solo-s3")
	if r := e.run(nil, "solo", "-o", "jsonpath={.uid} {.objects[*].key}"); r.Code != 0 || r.Stdout != "uid-9 out.txt" {
		t.Errorf("solo: %+v", r)
	}
	// Its snapshot travelled in a ConfigMap: nothing of it is in S3.
	if r := e.run(e.shell(), "cm"); r.Code != 1 || !strings.Contains(r.Stderr, "job.batch/cm was not submitted with --output-path, --checkpoint-dir or a --workdir through S3") {
		t.Errorf("cm: %+v", r)
	}
}

// A job with --checkpoint-dir: its checkpoint units are listed apart, newest first, each with
// every rank's files, a save cut short shown as not complete, the one a new attempt resumes from
// marked, and the checkpoints' own objects are not among the outputs.
func TestListsCheckpointsApart(t *testing.T) {
	srv := s3fake.Start(t, s3fake.Options{Bucket: "results-bucket", AccessKey: accessKey, SecretKey: secretKey, Now: t0})
	prefix := "results/ddp/uid-5/"
	srv.Put(prefix+"results/final.pth", "0123456789")
	for rank, files := range map[int][]string{
		0: {"checkpoint-4/model.safetensors", "checkpoint-4/trainer_state.json", "checkpoint-5/model.safetensors", "notes.txt"},
		1: {"checkpoint-4/rng_state_1.pth"},
	} {
		var m s3layout.Manifest
		m.Version, m.Rank = s3layout.ManifestVersion, rank
		for i, rel := range files {
			f, err := s3layout.NewManifestFile(prefix, rank, rel, int64(100*(i+1)), t0.Add(time.Duration(i)*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			srv.Put(f.Key, strings.Repeat("x", int(f.Size)))
			m.Files = append(m.Files, f)
		}
		data, err := s3layout.EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		srv.Put(s3layout.CheckpointManifestKey(prefix, rank), string(data))
	}
	job := fixture.Job("ddp").Namespace("default").UID("uid-5").Condition(batchv1.JobFailed, "", "").
		Annotation(s3layout.AnnotationCheckpoints, `{"dir":"/ckpt"}`).Annotation(s3layout.AnnotationS3Secret, "ddp-s3").Obj()
	e := &env{t: t, url: srv.Endpoint, client: fake.NewClientset(job)}
	r := e.run(e.shell(), "ddp")
	want := "KEY                 SIZE   LAST-MODIFIED\n" +
		"results/final.pth   10 B   2026-11-30T09:00:00Z\n" +
		"\n" +
		"CHECKPOINT     LAYOUT        FILES   SIZE    RANKS   WRITTEN                COMPLETE   RESUME\n" +
		"checkpoint-5   huggingface   1       300 B   0       2026-11-30T09:02:00Z   no         \n" +
		"checkpoint-4   huggingface   3       400 B   0,1     2026-11-30T09:01:00Z   yes        *\n"
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.Code, r.Stdout, want, r.Stderr)
	}
	r = e.run(e.shell(), "ddp", "-o", "jsonpath={.checkpoints[?(@.resume)].path}")
	if r.Code != 0 || r.Stdout != "checkpoint-4" {
		t.Errorf("jsonpath: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
}
