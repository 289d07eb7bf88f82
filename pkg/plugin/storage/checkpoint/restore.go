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
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
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
	// Units are the complete units restored.
	Units int
	// Resume is the container path to resume from (rank 0's newest complete unit, as its
	// framework's resume argument takes it), "" when there is none (a first attempt).
	Resume string
	// ResumeUnit is that unit; its Path is "" when there is none. Retention never deletes it
	// while this attempt runs.
	ResumeUnit s3layout.Unit
	// Own is this rank's manifest as found ("no files" on a first attempt): the uploader
	// continues it.
	Own s3layout.Manifest
	// Placed are the files the restore wrote, by path below the directory, as they are on
	// disk: the uploader never sends one of them back unless the command changes it.
	Placed map[string]s3layout.ManifestFile
}

// Restore reads every rank's manifest and downloads the restore plan into t.Dir: every file of
// every complete unit (a sharded one whole, whichever ranks kept its parts) and the files of no
// unit, each with its modification time set back to its write time in the manifest. A unit that
// was not complete (a save cut short) is never restored. Where the resumed unit's framework
// finds it through a marker (DeepSpeed's `latest`, Megatron's tracker), the marker is written
// to name it. Any error is final: the caller fails the attempt before the command runs.
func Restore(ctx context.Context, t Target, log io.Writer) (Restored, error) {
	manifests, err := readManifests(ctx, t.ResultsPrefix, t)
	if err != nil {
		return Restored{}, err
	}
	out := Restored{Own: manifests[t.Rank], Placed: map[string]s3layout.ManifestFile{}}
	from := ""
	units := s3layout.RunUnits(manifests, t.patterns())
	resume, ok := s3layout.ResumeUnit(units)
	if !ok && t.From != "" {
		// A new run's first attempts start from the earlier run; once this run has kept a
		// complete unit, its own are newer.
		if manifests, err = readManifests(ctx, t.From, t); err != nil {
			return Restored{}, err
		}
		units = s3layout.RunUnits(manifests, t.patterns())
		if resume, ok = s3layout.ResumeUnit(units); !ok {
			return Restored{}, fmt.Errorf("checkpoint restore: the run to resume from, %s, has no complete checkpoint", t.url(s3layout.CheckpointsPrefix(t.From)))
		}
		from = " from " + t.url(t.From)
	}
	if out.Own.Files == nil {
		out.Own = s3layout.Manifest{Version: s3layout.ManifestVersion, Rank: t.Rank, Files: []s3layout.ManifestFile{}}
	}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return Restored{}, fmt.Errorf("checkpoint restore: %w", err)
	}
	plan := s3layout.RestorePlan(t.Rank, manifests, units, t.patterns())
	if out.Files, out.Bytes, err = fetchPlan(ctx, t, plan); err != nil {
		return Restored{}, err
	}
	for _, f := range plan {
		out.Placed[f.Path] = f.ManifestFile
	}
	for _, u := range units {
		if u.Complete {
			out.Units++
		}
	}
	if ok {
		out.ResumeUnit = resume
		out.Resume = filepath.Join(t.Dir, filepath.FromSlash(resume.ResumePath()))
		if err := writeMarker(t.Dir, resume, out.Placed); err != nil {
			return Restored{}, err
		}
	}
	if log != nil {
		resume := "none"
		if out.Resume != "" {
			u := out.ResumeUnit
			resume = fmt.Sprintf("%s (%s %s, %s, %s)", out.Resume, u.Layout, u.Path, plural.N(len(u.Files), "file"), s3.HumanBytes(u.Size()))
		}
		fmt.Fprintf(log, "kubectl-tao: checkpoints: restored %s, %s (%s) of %s%s into %s; resume checkpoint: %s\n",
			plural.N(out.Units, "complete unit"), plural.N(out.Files, "file"), s3.HumanBytes(out.Bytes), plural.N(len(manifests), "rank"), from, t.Dir, resume)
	}
	return out, nil
}

// writeMarker points the framework at the resumed unit where it reads a marker to find it: the
// marker restored may name a newer unit that was not complete, or none.
func writeMarker(dir string, u s3layout.Unit, placed map[string]s3layout.ManifestFile) error {
	rel, content := u.Marker()
	if rel == "" {
		return nil
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return fmt.Errorf("checkpoint restore: writing %s: %w", p, err)
	}
	info, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("checkpoint restore: %w", err)
	}
	placed[rel] = s3layout.ManifestFile{Path: rel, Size: info.Size(), Written: info.ModTime().UTC()}
	return nil
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
