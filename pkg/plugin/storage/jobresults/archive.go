package jobresults

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// ReadLogArchive finds the archived rank logs of the run under resultsPrefix
// (s3layout.LogArchiveKey), in rank order and, within a rank, oldest attempt first
// (s3layout.LogArchiveAttempts); only ranks when given, only the attempt-th attempt of each
// rank when attempt > 0. No archived log at all is NotFound (the job was not staged, or ran
// with --no-log-archive). Each log is read as a stream when opened, within ctx.
func ReadLogArchive(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, ranks []int, attempt int) ([]tail.ArchivedLog, error) {
	where := "s3://" + bucket + "/" + s3layout.LogArchivePrefix(resultsPrefix)
	objs, err := s3.List(ctx, client, bucket, s3layout.LogArchivePrefix(resultsPrefix))
	if err != nil {
		return nil, s3.Describe(err, "listing", where)
	}
	listed := make([]s3layout.ArchivedObject, len(objs))
	for i, o := range objs {
		listed[i] = s3layout.ArchivedObject{Key: o.Key, LastModified: o.LastModified}
	}
	var keys []s3layout.LogArchiveAttempt
	for _, a := range s3layout.LogArchiveAttempts(resultsPrefix, listed) {
		if (len(ranks) == 0 || slices.Contains(ranks, a.Rank)) && (attempt <= 0 || a.Attempt == attempt) {
			keys = append(keys, a)
		}
	}
	if len(keys) == 0 {
		what := "no archived logs"
		switch {
		case len(ranks) > 0 && attempt > 0:
			what = fmt.Sprintf("no archived log of attempt %d of rank %v", attempt, ranks)
		case len(ranks) > 0:
			what = fmt.Sprintf("no archived logs of rank %v", ranks)
		case attempt > 0:
			what = fmt.Sprintf("no archived log of attempt %d", attempt)
		}
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s under %s", what, where))
	}
	out := make([]tail.ArchivedLog, 0, len(keys))
	for _, k := range keys {
		open := func() (io.ReadCloser, error) { return s3.Open(ctx, client, bucket, k.Key, "reading") }
		out = append(out, tail.ArchivedLog{Rank: k.Rank, Pod: k.Pod, Attempt: k.Attempt, Written: k.Written, Open: open})
	}
	return out, nil
}
