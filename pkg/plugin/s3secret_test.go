package plugin_test

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// A --s3-secret that does not exist in the command's namespace (here it exists in another one)
// is the same error in every command that reads a job's results or log archive: NotFound,
// naming the Secret and the namespace, nothing on stdout. The shell has no credentials, so the
// Secret is the only way to S3; no S3 server is needed, as nothing gets that far.
func TestS3SecretThatDoesNotExist(t *testing.T) {
	const missing = `error: --s3-secret: secret "nope" not found in namespace "ml": ` +
		"set ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, S3_ENDPOINT_URL in the shell, or name a Secret of that namespace\n"
	elsewhere := fixture.Secret("other", "nope", map[string]string{"ACCESS_KEY": "a", "SECRET_KEY": "s", "S3_BUCKET_NAME": "b"})
	// train failed and its pods are gone: its logs come from the archive.
	train := fixture.Job("train").Namespace("ml").UID("uid-1").Failed(1).Condition(batchv1.JobFailed, "BackoffLimitExceeded", "").
		Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, s3layout.SecretName("train")).Obj()
	for _, args := range [][]string{
		// The Job is gone: --s3-secret is the only way to its run.
		{"logs", "gone", "--s3-secret", "nope"},
		{"logs", "gone", "--from-archive", "--s3-secret", "nope"},
		{"logs", "gone", "--uid", "uid-0", "--s3-secret", "nope"},
		{"results", "gone", "--s3-secret", "nope"},
		{"results", "gone", "--all-runs", "--s3-secret", "nope"},
		{"diagnose", "gone", "--s3-secret", "nope"},
		{"diagnose", "gone", "-o", "json", "--s3-secret", "nope"},
		// The Job is there, with its own Secret: --s3-secret, named, is read instead.
		{"logs", "train", "--s3-secret", "nope"},
		{"results", "train", "--s3-secret", "nope"},
	} {
		r := cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(elsewhere, train)}.Run(context.Background(), args...)
		if r.Code != int(exitcode.NotFound) || r.Stdout != "" || r.Stderr != missing {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, stderr %q", args, r.Code, r.Stdout, r.Stderr, exitcode.NotFound, missing)
		}
	}

	// diagnose of a Job that is there makes its report from the Job and events all the same
	// (exit 0 whenever the analysis could be made) and warns that the archive was not read.
	r := cmdtest.Cmd{NS: "ml", Client: fake.NewClientset(elsewhere, train)}.Run(context.Background(), "diagnose", "train", "--s3-secret", "nope")
	warning := "Warning: the pods are gone and the log archive could not be read: " + strings.TrimPrefix(missing, "error: ")
	if r.Code != 0 || r.Stdout == "" || r.Stderr != warning {
		t.Errorf("diagnose of a live Job: exit %d, stdout %q, stderr %q; want exit 0, a report, stderr %q", r.Code, r.Stdout, r.Stderr, warning)
	}
}
