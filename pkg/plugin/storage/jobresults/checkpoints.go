package jobresults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Checkpoint is one complete checkpoint a run kept (--checkpoint-dir), as results, status and
// diagnose show it.
type Checkpoint struct {
	Rank int `json:"rank"`
	// Path is the file or torch.distributed.checkpoint directory below the checkpoint
	// directory.
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Written time.Time `json:"written"`
	// Resume marks the one a new attempt resumes from: rank 0's newest.
	Resume bool `json:"resume,omitempty"`
}

// checkpointOf is what a manifest's checkpoint is shown as.
func checkpointOf(rank int, c s3layout.Checkpoint) Checkpoint {
	var size int64
	for _, f := range c.Files {
		size += f.Size
	}
	return Checkpoint{Rank: rank, Path: c.Path, Size: size, Written: c.Written}
}

// errNoManifest: the rank kept no checkpoint yet.
var errNoManifest = errors.New("no checkpoint manifest")

// readManifest reads one rank's manifest.
func readManifest(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, rank int) (s3layout.Manifest, error) {
	key := s3layout.CheckpointManifestKey(resultsPrefix, rank)
	data, err := s3.Get(ctx, client, bucket, key)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return s3layout.Manifest{}, errNoManifest
		}
		return s3layout.Manifest{}, s3.Describe(err, "reading", "s3://"+bucket+"/"+key)
	}
	m, err := s3layout.ParseManifest(resultsPrefix, rank, data)
	if err != nil {
		return s3layout.Manifest{}, fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	}
	return m, nil
}

// ListCheckpoints reads the manifest of every rank among objs (listed under the run's results
// prefix) and returns their complete checkpoints, by rank, newest first.
func ListCheckpoints(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, objs []s3.Object, patterns []string) ([]Checkpoint, error) {
	var out []Checkpoint
	for _, o := range objs {
		rank, ok := s3layout.ManifestRank(resultsPrefix, o.Key)
		if !ok {
			continue
		}
		m, err := readManifest(ctx, client, bucket, resultsPrefix, rank)
		if err != nil {
			return nil, err
		}
		for i, c := range s3layout.Checkpoints(m.Files, patterns) {
			cp := checkpointOf(rank, c)
			cp.Resume = rank == 0 && i == 0
			out = append(out, cp)
		}
	}
	return out, nil
}

// LastCheckpoint is the checkpoint a new attempt of the run would resume from, read from rank
// 0's manifest in one request; false when the run kept none (no manifest, or no checkpoint in it).
func LastCheckpoint(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, patterns []string) (Checkpoint, bool, error) {
	m, err := readManifest(ctx, client, bucket, resultsPrefix, 0)
	if errors.Is(err, errNoManifest) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, err
	}
	c, ok := s3layout.ResumeCheckpoint(m, patterns)
	if !ok {
		return Checkpoint{}, false, nil
	}
	cp := checkpointOf(0, c)
	cp.Resume = true
	return cp, true, nil
}

// lookTimeout bounds KeptCheckpoint: status and diagnose answer even when the bucket does not.
const lookTimeout = 5 * time.Second

// KeptCheckpoint is the checkpoint a new attempt of job (submitted with --checkpoint-dir) would
// resume from, read with the credentials at hand (the shell's, else the Job's Secret) in one
// request to S3. kept is false when the job keeps no checkpoints, has kept none yet, or they
// cannot be read: callers show what they can without it.
func KeptCheckpoint(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, getenv func(string) string) (c Checkpoint, kept bool) {
	settings, ok, err := Checkpoints(job)
	if err != nil || !ok || settings.OnVolume {
		return Checkpoint{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	store, err := Connect(ctx, client, Lookup{Namespace: job.Namespace, Name: job.Name, Job: job, Source: Source{Getenv: getenv}})
	if err != nil {
		return Checkpoint{}, false
	}
	prefix, err := s3layout.ResultsPrefix(job.Name, string(job.UID))
	if err != nil {
		return Checkpoint{}, false
	}
	c, ok, err = LastCheckpoint(ctx, store.Client, store.Bucket, prefix, settings.PatternsOrDefault())
	return c, ok && err == nil
}
