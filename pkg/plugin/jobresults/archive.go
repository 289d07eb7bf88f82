package jobresults

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/tail"
)

// ReadLogArchive reads the archived rank logs of the run under resultsPrefix
// (s3layout.LogArchiveKey), in rank order, only ranks when given. No archived log at all is
// NotFound (the job was not staged, or ran with --no-log-archive).
func ReadLogArchive(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, ranks []int) ([]tail.ArchivedLog, error) {
	where := "s3://" + bucket + "/" + s3layout.LogArchivePrefix(resultsPrefix)
	objs, err := s3.List(ctx, client, bucket, s3layout.LogArchivePrefix(resultsPrefix))
	if err != nil {
		return nil, s3.Describe(err, "listing", where)
	}
	type ranked struct {
		rank int
		key  string
	}
	var keys []ranked
	for _, o := range objs {
		if r, ok := s3layout.LogArchiveRank(resultsPrefix, o.Key); ok && (len(ranks) == 0 || slices.Contains(ranks, r)) {
			keys = append(keys, ranked{r, o.Key})
		}
	}
	if len(keys) == 0 {
		what := "no archived logs"
		if len(ranks) > 0 {
			what = fmt.Sprintf("no archived logs of rank %v", ranks)
		}
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s under %s", what, where))
	}
	slices.SortFunc(keys, func(a, b ranked) int { return a.rank - b.rank })
	out := make([]tail.ArchivedLog, 0, len(keys))
	for _, k := range keys {
		obj, err := client.GetObject(ctx, bucket, k.key, minio.GetObjectOptions{})
		if err != nil {
			return nil, s3.Describe(err, "reading", "s3://"+bucket+"/"+k.key)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(obj)
		obj.Close()
		if err != nil {
			return nil, s3.Describe(err, "reading", "s3://"+bucket+"/"+k.key)
		}
		out = append(out, tail.ArchivedLog{Rank: k.rank, Data: b.Bytes()})
	}
	return out, nil
}
