package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Session is one attempt's checkpoints in the wrapper: restored before the command runs, kept
// while it runs, flushed once it ends.
type Session struct {
	Restored Restored
	// Attempt is this rank's attempt, counted as `logs --attempt` counts them.
	Attempt int

	target Target
	up     *Uploader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error
}

// Start restores the checkpoints of every rank into t.Dir, numbers this attempt of the rank
// (pod is this pod's name) and starts the uploader. An error is the attempt's failure: exit
// s3layout.ExitStageIn, the command not run.
func Start(ctx context.Context, t Target, pod string, keep int, log io.Writer) (*Session, error) {
	if keep < 0 {
		return nil, fmt.Errorf("%s must be 1 or more, got %d", s3layout.EnvStageCheckpointKeep, keep)
	}
	restored, err := Restore(ctx, t, log)
	if err != nil {
		return nil, err
	}
	attempt, err := recordAttempt(ctx, t, pod)
	if err != nil {
		return nil, err
	}
	s := &Session{Restored: restored, Attempt: attempt, target: t, done: make(chan struct{})}
	s.up = &Uploader{Target: t, Keep: keep, Log: log, Own: restored.Own, Placed: restored.Placed, Protect: restored.ResumeUnit.Path}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go func() {
		defer close(s.done)
		s.up.Run(uctx)
	}()
	return s, nil
}

// recordAttempt numbers this attempt of the rank (s3layout.AttemptOf) from the rank's archived
// logs and attempt records, then records it: a pod that archives no log still
// counts for the next attempt.
func recordAttempt(ctx context.Context, t Target, pod string) (int, error) {
	var archived []s3layout.ArchivedObject
	// This rank's keys only: every rank starts at once, and the run's whole archive grows with
	// ranks x attempts.
	for _, prefix := range []string{s3layout.LogArchiveRankPrefix(t.ResultsPrefix, t.Rank), s3layout.CheckpointAttemptsPrefix(t.ResultsPrefix, t.Rank)} {
		objs, err := s3.List(ctx, t.Client, t.Bucket, prefix)
		if err != nil {
			return 0, s3.Describe(err, "checkpoint restore: listing", t.url(prefix))
		}
		for _, o := range objs {
			archived = append(archived, s3layout.ArchivedObject{Key: o.Key, LastModified: o.LastModified})
		}
	}
	attempt := s3layout.AttemptOf(t.ResultsPrefix, t.Rank, pod, archived)
	key, err := s3layout.CheckpointAttemptKey(t.ResultsPrefix, t.Rank, pod)
	if err != nil {
		// Not a pod submit made ($TAO_POD_NAME unset): nothing to record it under.
		return attempt, nil
	}
	rec := []byte(pod + "\n")
	if err := s3.PutSnapshot(ctx, t.Client, t.Bucket, key, bytes.NewReader(rec), int64(len(rec))); err != nil {
		return 0, s3.Describe(err, "checkpoint restore: recording the attempt at", t.url(key))
	}
	return attempt, nil
}

// Env is what the command is told: the directory, the attempt and the checkpoint to resume
// from.
func (s *Session) Env() []string {
	return []string{
		s3layout.EnvCheckpointDir + "=" + s.target.Dir,
		s3layout.EnvAttempt + "=" + strconv.Itoa(s.Attempt),
		s3layout.EnvResumeCheckpoint + "=" + s.Restored.Resume,
	}
}

// Finish stops the uploader and makes the last upload, by deadline (the supervisor's grace
// budget decides it). Its error, once the command succeeded, is the attempt's:
// s3layout.ExitStageOut. Later calls return the first's result.
func (s *Session) Finish(ctx context.Context, deadline time.Time) error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		if err := s.up.Flush(fctx); err != nil {
			s.err = exitcode.WithCode(s3layout.ExitStageOut, fmt.Errorf("checkpoints: the final upload failed: %w", err))
		}
		files, bytes := s.up.Sent()
		s.up.logf("this attempt uploaded %s (%s) that rank %d wrote", plural.N(files, "file"), s3.HumanBytes(bytes), s.target.Rank)
	})
	return s.err
}

// Config is what `stage run` needs to keep one rank's checkpoints.
type Config struct {
	Target Target
	// Keep is how many complete checkpoints stay in S3.
	Keep int
	// OnVolume: the directory is on a --volume, which keeps the files (StartOnVolume).
	OnVolume bool
}

// FromEnv reads the checkpoint settings submit gives a pod ($TAO_STAGE_CHECKPOINT_DIR, _KEEP,
// _PATTERNS, _FROM, $TAO_STAGE_GRACE_PERIOD, and the S3 settings and run of the log archive) for rank.
func FromEnv(getenv func(string) string, rank int) (Config, error) {
	dir := getenv(s3layout.EnvStageCheckpointDir)
	if err := s3layout.ValidateCheckpointDir(dir); err != nil {
		return Config{}, err
	}
	keep := DefaultKeep
	if v := getenv(s3layout.EnvStageCheckpointKeep); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return Config{}, fmt.Errorf("$%s=%q: want a number, 1 or more", s3layout.EnvStageCheckpointKeep, v)
		}
		keep = n
	}
	var patterns []string
	for _, l := range strings.Split(getenv(s3layout.EnvStageCheckpointPatterns), "\n") {
		if l != "" {
			patterns = append(patterns, l)
		}
	}
	if patterns != nil {
		if err := s3layout.ValidateCheckpointPatterns(patterns); err != nil {
			return Config{}, err
		}
	}
	if getenv(s3layout.EnvStageCheckpointOnVolume) == "1" {
		return Config{Target: Target{Rank: rank, Dir: dir, Patterns: patterns}, Keep: keep, OnVolume: true}, nil
	}
	cfg := s3.ConfigFromEnv(getenv)
	if err := cfg.Check(true, "the environment"); err != nil {
		return Config{}, err
	}
	prefix, err := s3layout.ResultsPrefix(getenv(s3layout.EnvJobID), getenv(s3layout.EnvJobUID))
	if err != nil {
		return Config{}, err
	}
	client, err := s3.NewClient(cfg, nil)
	if err != nil {
		return Config{}, err
	}
	from := ""
	if v := getenv(s3layout.EnvStageCheckpointFrom); v != "" {
		name, uid, _ := strings.Cut(v, "/")
		if from, err = s3layout.ResultsPrefix(name, uid); err != nil {
			return Config{}, fmt.Errorf("$%s=%q: %w", s3layout.EnvStageCheckpointFrom, v, err)
		}
	}
	t := Target{Client: client, Bucket: cfg.Bucket, ResultsPrefix: prefix, Rank: rank, Dir: dir, Patterns: patterns, From: from}
	return Config{Target: t, Keep: keep}, nil
}
