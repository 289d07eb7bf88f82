// Package checkpoint is the in-pod engine of the checkpoints kept in S3 (the layout, manifest
// and choices are the pure core in s3layout): Restore brings a rank's files back into the
// checkpoint directory at the start of an attempt, and an Uploader keeps the complete files in
// S3 while the command runs and flushes them when it ends. It never prints: it writes log lines
// to the writer it is handed.
package checkpoint

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Target is where one rank's checkpoints live: the bucket, the run's results prefix, the rank,
// and the container directory they are written to.
type Target struct {
	Client        *minio.Client
	Bucket        string
	ResultsPrefix string
	Rank          int
	Dir           string
	// Patterns name the checkpoint files (s3layout.DefaultCheckpointPatterns when empty).
	Patterns []string
	// From is the results prefix of an earlier run (--resume-from): restored from while this
	// run has no checkpoint of its own; "" for none.
	From string
}

func (t Target) patterns() []string {
	if len(t.Patterns) == 0 {
		return s3layout.DefaultCheckpointPatterns
	}
	return t.Patterns
}

func (t Target) url(key string) string { return "s3://" + t.Bucket + "/" + key }

// Restored is what a restore brought back.
type Restored struct {
	// Files restored, and their bytes.
	Files int
	Bytes int64
	// Resume is the container path of the checkpoint to resume from (rank 0's newest), "" when
	// there is none (a first attempt).
	Resume string
	// Own is this rank's manifest as found ("no files" on a first attempt): the uploader
	// continues it.
	Own s3layout.Manifest
}

// Restore reads every rank's manifest and downloads the restore plan into t.Dir, each file
// with its modification time set back to its write time in the manifest. Only files a manifest
// names are restored, so never one that was still being written. Any error is final: the
// caller fails the attempt before the command runs.
func Restore(ctx context.Context, t Target, log io.Writer) (Restored, error) {
	manifests, err := readManifests(ctx, t.ResultsPrefix, t)
	if err != nil {
		return Restored{}, err
	}
	out := Restored{Own: manifests[t.Rank]}
	from := ""
	if len(manifests) == 0 && t.From != "" {
		// A new run's first attempts start from the earlier run; once this run has kept a
		// checkpoint, its own are newer. The files are uploaded again under this run, which
		// then no longer needs the earlier one.
		if manifests, err = readManifests(ctx, t.From, t); err != nil {
			return Restored{}, err
		}
		if len(manifests) == 0 {
			return Restored{}, fmt.Errorf("checkpoint restore: the run to resume from, %s, has no checkpoints", t.url(s3layout.CheckpointsPrefix(t.From)))
		}
		from = " from " + t.url(t.From)
	}
	if out.Own.Files == nil {
		out.Own = s3layout.Manifest{Version: s3layout.ManifestVersion, Rank: t.Rank, Files: []s3layout.ManifestFile{}}
	}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return Restored{}, fmt.Errorf("checkpoint restore: %w", err)
	}
	for _, f := range s3layout.RestorePlan(t.Rank, manifests) {
		dst := filepath.Join(t.Dir, filepath.FromSlash(f.Path))
		if err := fetch(ctx, t, f.Key, dst); err != nil {
			return Restored{}, err
		}
		if err := os.Chtimes(dst, f.Written, f.Written); err != nil {
			return Restored{}, fmt.Errorf("checkpoint restore: %w", err)
		}
		out.Files++
		out.Bytes += f.Size
	}
	if cp, ok := s3layout.ResumeCheckpoint(manifests[0], t.patterns()); ok {
		out.Resume = filepath.Join(t.Dir, filepath.FromSlash(cp.Path))
	}
	if log != nil {
		resume := "none"
		if out.Resume != "" {
			resume = out.Resume
		}
		fmt.Fprintf(log, "kubectl-tao: checkpoints: restored %d files (%s) of %d ranks%s into %s; resume checkpoint: %s\n",
			out.Files, s3.HumanBytes(out.Bytes), len(manifests), from, t.Dir, resume)
	}
	return out, nil
}

// readManifests reads the manifest of every rank of the run under resultsPrefix that wrote one,
// by rank.
func readManifests(ctx context.Context, resultsPrefix string, t Target) (map[int]s3layout.Manifest, error) {
	prefix := s3layout.CheckpointsPrefix(resultsPrefix)
	objs, err := s3.List(ctx, t.Client, t.Bucket, prefix)
	if err != nil {
		return nil, s3.Describe(err, "checkpoint restore: listing", t.url(prefix))
	}
	out := map[int]s3layout.Manifest{}
	for _, o := range objs {
		rank, ok := s3layout.ManifestRank(resultsPrefix, o.Key)
		if !ok {
			continue
		}
		data, err := get(ctx, t, o.Key)
		if err != nil {
			return nil, err
		}
		m, err := s3layout.ParseManifest(resultsPrefix, rank, data)
		if err != nil {
			return nil, fmt.Errorf("checkpoint restore: %s: %w", t.url(o.Key), err)
		}
		out[rank] = m
	}
	return out, nil
}

func get(ctx context.Context, t Target, key string) ([]byte, error) {
	data, err := s3.Get(ctx, t.Client, t.Bucket, key)
	if err != nil {
		return nil, s3.Describe(err, "checkpoint restore: reading", t.url(key))
	}
	return data, nil
}

// fetch downloads key to dst (the client writes a part file beside it and renames it, so that
// dst is never a part).
func fetch(ctx context.Context, t Target, key, dst string) error {
	if err := t.Client.FGetObject(ctx, t.Bucket, key, dst, minio.GetObjectOptions{}); err != nil {
		return s3.Describe(err, "checkpoint restore: downloading", t.url(key))
	}
	return nil
}
