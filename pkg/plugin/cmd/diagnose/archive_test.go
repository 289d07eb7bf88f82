package diagnose_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// A staged job that failed and whose pods are gone: diagnose reads the failing rank's last lines
// from the log archive, the job's own Secret giving the credentials, and says where they came from.
func TestDiagnoseFromTheLogArchive(t *testing.T) {
	store := s3fake.Start(t, s3fake.Options{Bucket: "results"})
	creds := store.Env()
	ctx := context.Background()
	j := job("gone", 2).UID("gone-uid").Conditions(backoff).Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, "gone-s3").Obj()
	prefix, _ := s3layout.ResultsPrefix("gone", "gone-uid")
	for key, body := range map[string]string{
		// Rank 1's first attempt was fine until a node went away; its second ran out of GPU memory.
		s3layout.LogArchiveKey(prefix, 1, "gone-1-aaa"): "step 1\n",
		s3layout.LogArchiveKey(prefix, 0, "gone-0-aaa"): "step 1\nstep 2\n",
	} {
		store.Put(key, body)
	}
	oom := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	body := strings.Repeat("step\n", 80) + oom + "\nexiting\n"
	store.Put(s3layout.LogArchiveKey(prefix, 1, "gone-1-bbb"), body)

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
