package submit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// codeDir is a small project: a script, a data file, and what its .gitignore leaves out.
func codeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"run.sh": "cat data.csv\n", "data.csv": "1,2\n", ".gitignore": ".env\n", ".env": "TOKEN=do-not-ship\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// incompressible writes n bytes no compressor can shrink.
func incompressible(t *testing.T, name string, n int) {
	t.Helper()
	var data []byte
	block := sha256.Sum256([]byte(name))
	for len(data) < n {
		block = sha256.Sum256(block[:])
		data = append(data, block[:]...)
	}
	if err := os.WriteFile(name, data[:n], 0o644); err != nil {
		t.Fatal(err)
	}
}

func workdirArgs(name, dir string, extra ...string) []string {
	return append([]string{name, "--image", "img", "--gpus", "0", "--stager-image", "registry.example/stager:dev", "--workdir", dir}, extra...)
}

func TestSubmitWorkdirInAnOwnedConfigMap(t *testing.T) {
	c := newClient()
	r := run(t, cmdtest.Cmd{Client: c}, append(workdirArgs("train", codeDir(t)), "--", "bash run.sh")...)
	if r.Code != 0 || r.Stdout != "job.batch/train created\nconfigmap/train-workdir created\n" {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create configmaps,patch jobs" {
		t.Errorf("mutations = %s, want the ConfigMap made while the Job is suspended", got)
	}
	ctx := context.Background()
	job, _ := c.BatchV1().Jobs("default").Get(ctx, "train", metav1.GetOptions{})
	cm, err := c.CoreV1().ConfigMaps("default").Get(ctx, "train-workdir", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(cm.BinaryData["workdir.tar.zst"])
	sum := hex.EncodeToString(h[:])
	if job.Annotations["kubectl-tao.dev/workdir-sha256"] != sum || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != job.UID {
		t.Errorf("annotation %q, archive %s, owners %+v", job.Annotations["kubectl-tao.dev/workdir-sha256"], sum, cm.OwnerReferences)
	}
	if !strings.Contains(r.Stderr, "3 files") || !strings.Contains(r.Stderr, sum) || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line with 3 files (run.sh, data.csv, .gitignore; not .env) and %s", r.Stderr, sum)
	}
}

func TestSubmitWorkdirErrorsTouchNothing(t *testing.T) {
	big := t.TempDir()
	incompressible(t, filepath.Join(big, "weights.bin"), 2<<20)
	incompressible(t, filepath.Join(big, "small.bin"), 1000)
	good, escape := codeDir(t), codeDir(t)
	if err := os.Symlink("/etc/passwd", filepath.Join(escape, "passwd")); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		code exitcode.Code
		want []string
	}{
		"over --workdir-max-size": {workdirArgs("j", big, "--workdir-max-size", "1Mi"), exitcode.Usage,
			[]string{"more than --workdir-max-size 1.0 MiB", "2.0 MiB  weights.bin", "small.bin"}},
		"too big for a ConfigMap": {workdirArgs("j", big), exitcode.Usage,
			[]string{"more than the 1048576 a ConfigMap can hold", "configure S3 staging", "--s3-secret", ".taoignore"}},
		"escaping symlink":   {workdirArgs("j", escape), exitcode.Usage, []string{"symlink passwd -> /etc/passwd points outside"}},
		"not a directory":    {workdirArgs("j", filepath.Join(escape, "run.sh")), exitcode.Usage, []string{"not a directory"}},
		"bad max size":       {workdirArgs("j", good, "--workdir-max-size", "lots"), exitcode.Usage, []string{"invalid --workdir-max-size"}},
		"mount without dir":  {[]string{"j", "--image", "img", "--workdir-mount", "/w"}, exitcode.Usage, []string{"--workdir-mount only applies with --workdir"}},
		"relative mount":     {workdirArgs("j", good, "--workdir-mount", "w"), exitcode.Usage, []string{"must be absolute"}},
		"dev build no image": {[]string{"j", "--image", "img", "--workdir", good}, exitcode.Usage, []string{"development build", "--stager-image"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient()
			r := run(t, cmdtest.Cmd{Client: c}, append(tc.args, "--", "true")...)
			if r.Code != int(tc.code) || r.Stdout != "" {
				t.Fatalf("got %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.Stderr)
				}
			}
			if len(c.Actions()) != 0 {
				t.Errorf("requests were sent: %v", mutations(c))
			}
		})
	}
}

func TestSubmitWorkdirClientDryRun(t *testing.T) {
	f := cmdtest.Cmd{ClientErr: errors.New("must not be called")}
	// A development build: the dry run needs no stager image.
	r := run(t, f, "j", "--image", "img", "--workdir", codeDir(t), "--dry-run=client", "-o", "name", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/j\nconfigmap/j-workdir\n" {
		t.Fatalf("got %+v", r)
	}
	if !strings.Contains(r.Stderr, "3 files") || !strings.Contains(r.Stderr, "sha256 ") || !strings.Contains(r.Stderr, "would ship in ConfigMap j-workdir") {
		t.Errorf("stderr %q", r.Stderr)
	}
}

func TestSubmitWorkdirFailedConfigMapCreateLeavesNothing(t *testing.T) {
	c := newClient()
	c.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("request entity too large")
	})
	r := run(t, cmdtest.Cmd{Client: c}, append(workdirArgs("train", codeDir(t)), "--", "true")...)
	if r.Code == 0 {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create configmaps,delete jobs" {
		t.Errorf("mutations = %s", got)
	}
}

// s3Server is an in-memory S3 with the bucket of shellCreds, and the shell pointing at it.
func s3Server(t *testing.T) (map[string]string, *minio.Client) {
	t.Helper()
	srv := s3fake.Start(t, s3fake.Options{Bucket: shellCreds["S3_BUCKET_NAME"], AccessKey: accessKey, SecretKey: secretKey})
	return srv.Env(), srv.Client
}

func TestSubmitWorkdirThroughS3(t *testing.T) {
	env, s3c := s3Server(t)
	c := newClient()
	dir := codeDir(t)
	incompressible(t, filepath.Join(dir, "weights.bin"), 2<<20) // too big for a ConfigMap: S3 takes it
	r := runEnv(t, cmdtest.Cmd{Client: c}, env, append(workdirArgs("train", dir), "--", "bash run.sh")...)
	if r.Code != 0 || r.Stdout != "job.batch/train created\nsecret/train-s3 created\n" {
		t.Fatalf("got %+v", r)
	}
	job, _ := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{})
	key := "results/train/" + string(job.UID) + "/.kubectl-tao/workdir.tar.zst"
	obj, err := s3c.GetObject(context.Background(), env["S3_BUCKET_NAME"], key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != job.Annotations["kubectl-tao.dev/workdir-sha256"] {
		t.Errorf("uploaded archive has sha256 %s, the Job says %s", got, job.Annotations["kubectl-tao.dev/workdir-sha256"])
	}
	noLeak(t, "stderr", r.Stderr)
}

func TestSubmitWorkdirS3RollbackRemovesTheArchive(t *testing.T) {
	env, s3c := s3Server(t)
	c := newClient()
	c.PrependReactor("patch", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("resume failed")
	})
	r := runEnv(t, cmdtest.Cmd{Client: c}, env, append(workdirArgs("train", codeDir(t)), "--", "true")...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "resume failed") {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,patch jobs,delete secrets,delete jobs" {
		t.Errorf("mutations = %s", got)
	}
	if _, err := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Job survived: %v", err)
	}
	for o := range s3c.ListObjects(context.Background(), env["S3_BUCKET_NAME"], minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("left in S3: %s %v", o.Key, o.Err)
	}
}

func TestSubmitWorkdirS3UploadFailureLeavesNothing(t *testing.T) {
	env, _ := s3Server(t)
	env["S3_BUCKET_NAME"] = "no-such-bucket"
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, env, append(workdirArgs("train", codeDir(t)), "--", "true")...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "uploading the --workdir archive") {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,delete secrets,delete jobs" {
		t.Errorf("mutations = %s, want the Job never resumed and removed with its Secret", got)
	}
}

// A client dry run through S3 on a development build needs no --stager-image either: it prints
// the manifest with the placeholder image, says on stderr that it is one, and sends nothing, to
// the cluster or to S3. A real submit still needs the flag (TestSubmitStagingUsageErrors).
func TestSubmitS3ClientDryRunNeedsNoStagerImage(t *testing.T) {
	env, s3c := s3Server(t)
	const placeholder = "ghcr.io/kubectl-tao/kubectl-tao:v0.0.0-dev"
	for name, extra := range map[string][]string{
		"workdir":     {"--workdir", codeDir(t)},
		"output-path": {"--output-path", "/results"},
		"both":        {"--workdir", codeDir(t), "--output-path", "/results"},
	} {
		t.Run(name, func(t *testing.T) {
			f := cmdtest.Cmd{ClientErr: errors.New("a client dry run must not need a cluster")}
			args := append(append([]string{"j", "--image", "img", "--gpus", "0"}, extra...), "--dry-run=client", "-o", "yaml", "--", "true")
			r := runEnv(t, f, env, args...)
			if r.Code != 0 {
				t.Fatalf("got %+v", r)
			}
			if !strings.Contains(r.Stdout, "image: "+placeholder) {
				t.Errorf("the manifest does not show the placeholder %s:\n%s", placeholder, r.Stdout)
			}
			if !strings.Contains(r.Stderr, "placeholder "+placeholder+", which does not exist") {
				t.Errorf("stderr does not name the placeholder: %q", r.Stderr)
			}
			if extra[0] == "--workdir" && !strings.Contains(r.Stderr, "would ship in s3://BUCKET/results/j/JOB_UID/.kubectl-tao/workdir.tar.zst") {
				t.Errorf("stderr %q", r.Stderr)
			}
			noLeak(t, "the output", r.Stdout+r.Stderr)
		})
	}
	for o := range s3c.ListObjects(context.Background(), env["S3_BUCKET_NAME"], minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("a dry run uploaded %s %v", o.Key, o.Err)
	}
}
