package diagnose_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// A staged job that failed and whose pods are gone: diagnose reads the failing rank's last lines
// from the log archive, the job's own Secret giving the credentials, and says where they came from.
func TestDiagnoseFromTheLogArchive(t *testing.T) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	creds := map[string]string{"ACCESS_KEY": "AKIATEST", "SECRET_KEY": "diag-secret", "S3_BUCKET_NAME": "results", "S3_ENDPOINT_URL": srv.URL}
	c, err := s3.NewClient(s3.Config{AccessKey: "AKIATEST", SecretKey: "diag-secret", Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.MakeBucket(ctx, "results", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	j := job("gone", 2).UID("gone-uid").Conditions(backoff).Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, "gone-s3").Obj()
	prefix, _ := s3layout.ResultsPrefix("gone", "gone-uid")
	for key, body := range map[string]string{
		// Rank 1's first attempt was fine until a node went away; its second ran out of GPU memory.
		s3layout.LogArchiveKey(prefix, 1, "gone-1-aaa"): "step 1\n",
		s3layout.LogArchiveKey(prefix, 0, "gone-0-aaa"): "step 1\nstep 2\n",
	} {
		if _, err := c.PutObject(ctx, "results", key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	oom := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	body := strings.Repeat("step\n", 80) + oom + "\nexiting\n"
	if _, err := c.PutObject(ctx, "results", s3layout.LogArchiveKey(prefix, 1, "gone-1-bbb"), strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	cs := fake.NewClientset(j, fixture.Secret("ml", "gone-s3", creds))
	r := cmdtest.Cmd{NS: "ml", Client: cs, Now: now}.Run(ctx, "diagnose", "gone")
	for _, want := range []string{
		"What happened: rank 1: CUDAOutOfMemory (the archived log says: " + oom + ")",
		"Where first:   pod gone-1-bbb",
		"Note: the pods are gone: the log findings come from the archived logs in s3://results/" + prefix + ".kubectl-tao/logs/.",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in\n%s", want, r.Stdout)
		}
	}
	if r.Code != 0 || r.Stderr != "" {
		t.Errorf("exit %d, stderr %q", r.Code, r.Stderr)
	}

	// No credentials anywhere: the analysis without pods, and a warning.
	cs = fake.NewClientset(j)
	r = cmdtest.Cmd{NS: "ml", Client: cs, Now: now}.Run(ctx, "diagnose", "gone")
	if r.Code != 0 || !strings.Contains(r.Stdout, "pods are gone") || !strings.Contains(r.Stderr, "Warning: the pods are gone and the log archive could not be read: secret/gone-s3") {
		t.Errorf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
}
