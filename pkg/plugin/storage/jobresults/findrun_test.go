package jobresults

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// FindRun's errors say which step failed: connecting (a *ConnectError, whose text is its
// cause's) or finding the run; and a run found reads its log archive.
func TestFindRun(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	none := func(string) string { return "" }

	_, err := FindRun(ctx, client, Lookup{Namespace: "ml", Name: "gone", Source: Source{Getenv: none}})
	var ce *ConnectError
	if !errors.As(err, &ce) || exitcode.Of(err) != exitcode.Usage || !strings.HasPrefix(err.Error(), "job.batch/gone is gone, and its S3 Secret with it") {
		t.Fatalf("no credentials: got %v (exit %d), want a usage *ConnectError", err, exitcode.Of(err))
	}

	srv := s3fake.Start(t, s3fake.Options{Bucket: "results"})
	env := srv.Env()
	src := Source{Getenv: func(k string) string { return env[k] }}
	_, err = FindRun(ctx, client, Lookup{Namespace: "ml", Name: "gone", Source: src})
	if errors.As(err, &ce) || exitcode.Of(err) != exitcode.NotFound {
		t.Fatalf("no run: got %v (exit %d), want NotFound, not a *ConnectError", err, exitcode.Of(err))
	}

	prefix, _ := s3layout.ResultsPrefix("gone", "run-1")
	srv.Put(s3layout.LogArchiveKey(prefix, 0, "gone-0-aaa"), "step 1\n")
	run, err := FindRun(ctx, client, Lookup{Namespace: "ml", Name: "gone", Source: src})
	if err != nil || run.UID != "run-1" || run.Prefix != prefix {
		t.Fatalf("got %+v, %v; want run-1 under %s", run, err, prefix)
	}
	if want := "s3://results/" + s3layout.LogArchivePrefix(prefix); run.LogArchiveURL() != want {
		t.Errorf("LogArchiveURL = %s, want %s", run.LogArchiveURL(), want)
	}
	logs, err := run.ReadLogs(ctx, nil, 0)
	if err != nil || len(logs) != 1 {
		t.Fatalf("ReadLogs = %+v, %v", logs, err)
	}
	if lines, err := logs[0].LastLines(-1); err != nil || !slices.Equal(lines, []string{"step 1"}) {
		t.Fatalf("the log reads %q, %v", lines, err)
	}
}
