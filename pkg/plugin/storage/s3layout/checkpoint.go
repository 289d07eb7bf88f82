package s3layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Checkpoints: the files a command writes under its checkpoint directory are kept per rank
// under the run's results prefix, beside the outputs and the log archive:
//
//	<prefix>.kubectl-tao/checkpoints/rank-<N>/files/<path under the directory>
//	<prefix>.kubectl-tao/checkpoints/rank-<N>/manifest.json
//
// The files are uploaded once complete; the manifest, written after them, says which are
// complete, so a restore never brings back a file that was still being written. The files have
// a folder of their own so that no file of the user's can take the manifest's key.

// What the wrapper hands `stage run` (plain values), and what it tells the command.
const (
	// EnvStageCheckpointDir is --checkpoint-dir; unset, no checkpoints are kept.
	EnvStageCheckpointDir = "TAO_STAGE_CHECKPOINT_DIR"
	// EnvStageCheckpointKeep is --checkpoint-keep.
	EnvStageCheckpointKeep = "TAO_STAGE_CHECKPOINT_KEEP"
	// EnvStageCheckpointPatterns is --checkpoint-pattern, one per line.
	EnvStageCheckpointPatterns = "TAO_STAGE_CHECKPOINT_PATTERNS"
	// EnvStageGracePeriod is the pod's termination grace period in seconds: the last upload
	// after a SIGTERM must end within it, before the log archive's and the outputs'.
	EnvStageGracePeriod = "TAO_STAGE_GRACE_PERIOD"
	// EnvStageCheckpointFrom is --resume-from: NAME/UID of the run whose checkpoints a new run
	// starts from, until it has checkpoints of its own.
	EnvStageCheckpointFrom = "TAO_STAGE_CHECKPOINT_FROM"
	// EnvStageCheckpointOnVolume is "1" when --checkpoint-dir is on a --volume: the volume
	// keeps the files, nothing goes to S3, and the attempts are recorded on it.
	EnvStageCheckpointOnVolume = "TAO_STAGE_CHECKPOINT_ON_VOLUME"

	// EnvCheckpointDir tells the command where to write its checkpoints.
	EnvCheckpointDir = "TAO_CHECKPOINT_DIR"
	// EnvAttempt is this rank's attempt, from 1 (AttemptOf).
	EnvAttempt = "TAO_ATTEMPT"
	// EnvResumeCheckpoint is the restored checkpoint to resume from, "" on a first attempt.
	EnvResumeCheckpoint = "TAO_RESUME_CHECKPOINT"
)

// CheckpointsPrefix is where a run's checkpoints live: <prefix>.kubectl-tao/checkpoints/.
func CheckpointsPrefix(resultsPrefix string) string {
	return resultsPrefix + ToolDir + "/checkpoints/"
}

// CheckpointRankPrefix is one rank's checkpoints: <prefix>.kubectl-tao/checkpoints/rank-<N>/.
func CheckpointRankPrefix(resultsPrefix string, rank int) string {
	return CheckpointsPrefix(resultsPrefix) + "rank-" + strconv.Itoa(rank) + "/"
}

// CheckpointFilesPrefix is the folder of one rank's checkpoint files.
func CheckpointFilesPrefix(resultsPrefix string, rank int) string {
	return CheckpointRankPrefix(resultsPrefix, rank) + "files/"
}

// CheckpointManifestKey is one rank's manifest.
func CheckpointManifestKey(resultsPrefix string, rank int) string {
	return CheckpointRankPrefix(resultsPrefix, rank) + "manifest.json"
}

// ManifestRank is the rank whose CheckpointManifestKey key is, and false for any other key
// (a file of the user's named manifest.json included).
func ManifestRank(resultsPrefix, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, CheckpointsPrefix(resultsPrefix)+"rank-")
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(rest, "/")
	rank, err := strconv.Atoi(n)
	if err != nil || rank < 0 || strconv.Itoa(rank) != n || key != CheckpointManifestKey(resultsPrefix, rank) {
		return 0, false
	}
	return rank, true
}

// CheckpointFileKey is the key of the file at rel (a path relative to the checkpoint
// directory) of one rank.
func CheckpointFileKey(resultsPrefix string, rank int, rel string) (string, error) {
	if err := ValidateCheckpointFile(rel); err != nil {
		return "", err
	}
	return CheckpointFilesPrefix(resultsPrefix, rank) + rel, nil
}

// ValidateCheckpointFile accepts a relative, clean path with no ".." and no control character:
// a file below the checkpoint directory that maps to a key and back.
func ValidateCheckpointFile(rel string) error {
	switch {
	case rel == "" || rel == ".":
		return errors.New("empty checkpoint file path")
	case strings.HasPrefix(rel, "/"):
		return fmt.Errorf("checkpoint file path %q must be relative to the checkpoint directory", rel)
	case strings.ContainsAny(rel, "\n\r\x00"):
		return fmt.Errorf("checkpoint file path %q contains a control character", rel)
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." {
			return fmt.Errorf("checkpoint file path %q may not contain \"..\"", rel)
		}
	}
	if path.Clean(rel) != rel {
		return fmt.Errorf("checkpoint file path %q is not clean (want %q)", rel, path.Clean(rel))
	}
	return nil
}

// ValidateCheckpointDir is ValidateOutputPath for --checkpoint-dir: the container directory
// whose files are kept. It may not be an output too (checked where both are known).
func ValidateCheckpointDir(p string) error {
	if err := ValidateOutputPath(p); err != nil {
		return fmt.Errorf("--checkpoint-dir: %w", err)
	}
	return nil
}

// ManifestVersion is the version of the manifest this build writes; it reads version 1 too
// (files only, from before units were sealed).
const ManifestVersion = 2

// Manifest is what one rank has complete in S3: written after its files, read before a restore.
type Manifest struct {
	Version int            `json:"version"`
	Rank    int            `json:"rank"`
	Files   []ManifestFile `json:"files"`
	// Sealed are the units this rank saw marked complete outside their own files: named by
	// DeepSpeed's or Megatron's marker, or a user's directory renamed into place or settled.
	Sealed []string `json:"sealed,omitempty"`
}

// ManifestFile is one complete file: its key, its size, and its write time (the file's
// modification time when it was uploaded; a restore sets it back).
type ManifestFile struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	Written time.Time `json:"written"`
	// Path is the file's path below the checkpoint directory, read from the key.
	Path string `json:"-"`
}

// NewManifestFile is the entry of the file at rel of a rank.
func NewManifestFile(resultsPrefix string, rank int, rel string, size int64, written time.Time) (ManifestFile, error) {
	key, err := CheckpointFileKey(resultsPrefix, rank, rel)
	if err != nil {
		return ManifestFile{}, err
	}
	return ManifestFile{Key: key, Size: size, Written: written.UTC(), Path: rel}, nil
}

// EncodeManifest writes m with its files in path order, so that the same state writes the same
// bytes.
func EncodeManifest(m Manifest) ([]byte, error) {
	m.Version = ManifestVersion
	m.Files = slices.Clone(m.Files)
	if m.Files == nil {
		m.Files = []ManifestFile{}
	}
	slices.SortFunc(m.Files, func(a, b ManifestFile) int { return strings.Compare(a.Key, b.Key) })
	m.Sealed = slices.Compact(slices.Sorted(slices.Values(m.Sealed)))
	return json.MarshalIndent(m, "", "  ")
}

// ParseManifest reads rank's manifest of the run under resultsPrefix and checks it: the
// version, the rank, and each file (a key of this rank's files, a size, a write time, no file
// twice, no file below another).
func ParseManifest(resultsPrefix string, rank int, data []byte) (Manifest, error) {
	fail := func(format string, a ...any) (Manifest, error) {
		return Manifest{}, fmt.Errorf("checkpoint manifest of rank %d: "+format, append([]any{rank}, a...)...)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fail("not a manifest: %v", err)
	}
	if dec.More() {
		return fail("not a manifest: data after the JSON object")
	}
	switch {
	case m.Version == 0:
		return fail("no version")
	case m.Version != ManifestVersion && m.Version != 1:
		return fail("version %d, but this kubectl-tao reads version %d: use the release that wrote it", m.Version, ManifestVersion)
	case m.Rank != rank:
		return fail("it says rank %d", m.Rank)
	}
	files := CheckpointFilesPrefix(resultsPrefix, rank)
	seen := map[string]bool{}
	for i := range m.Files {
		f := &m.Files[i]
		rel, ok := strings.CutPrefix(f.Key, files)
		if !ok {
			return fail("file key %q is not under %s", f.Key, files)
		}
		if err := ValidateCheckpointFile(rel); err != nil {
			return fail("file key %q: %v", f.Key, err)
		}
		switch {
		case f.Size < 0:
			return fail("file %q has a negative size %d", rel, f.Size)
		case f.Written.IsZero():
			return fail("file %q has no write time", rel)
		case seen[rel]:
			return fail("file %q is listed twice", rel)
		}
		seen[rel] = true
		f.Path = rel
		f.Written = f.Written.UTC()
	}
	for rel := range seen {
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			if seen[d] {
				return fail("file %q is below file %q", rel, d)
			}
		}
	}
	for _, u := range m.Sealed {
		if err := ValidateCheckpointFile(u); err != nil {
			return fail("sealed unit: %v", err)
		}
	}
	if m.Files == nil {
		m.Files = []ManifestFile{}
	}
	return m, nil
}

// CheckpointSettings are what later commands need of a job's --checkpoint-dir (annotation
// AnnotationCheckpoints): the directory, and the names its checkpoints have (nil: the defaults).
type CheckpointSettings struct {
	Dir      string   `json:"dir"`
	Patterns []string `json:"patterns,omitempty"`
	// OnVolume: the directory is on a --volume, which keeps the files; nothing is in S3.
	OnVolume bool `json:"onVolume,omitempty"`
}

// ParseCheckpointSettings reads the annotation's value.
func ParseCheckpointSettings(v string) (CheckpointSettings, error) {
	var c CheckpointSettings
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return CheckpointSettings{}, fmt.Errorf("annotation %s is not its JSON: %w", AnnotationCheckpoints, err)
	}
	if c.Patterns != nil {
		if err := ValidateCheckpointPatterns(c.Patterns); err != nil {
			return CheckpointSettings{}, fmt.Errorf("annotation %s: %w", AnnotationCheckpoints, err)
		}
	}
	return c, nil
}

// PatternsOrDefault are the names of the checkpoints.
func (c CheckpointSettings) PatternsOrDefault() []string {
	if len(c.Patterns) == 0 {
		return DefaultCheckpointPatterns
	}
	return c.Patterns
}

// DefaultCheckpointKeep is how many complete checkpoints stay in S3 by default (--checkpoint-keep).
const DefaultCheckpointKeep = 2

// DefaultCheckpointPatterns are the names of the usual checkpoint files.
var DefaultCheckpointPatterns = []string{"*.pth", "*.pt", "*.ckpt", "*.tlt", "*.hdf5", "*.safetensors"}

// DCPMetadata is the file torch.distributed.checkpoint writes last into a checkpoint
// directory: the directory is a complete checkpoint once it is.
const DCPMetadata = ".metadata"

// ValidateCheckpointPatterns checks --checkpoint-pattern: shell patterns (path.Match) of a
// file's name, or of a directory's name when it ends in "/" (the directory is one checkpoint).
func ValidateCheckpointPatterns(patterns []string) error {
	if len(patterns) == 0 {
		return errors.New("--checkpoint-pattern: no pattern")
	}
	for _, p := range patterns {
		switch {
		case strings.TrimSpace(p) == "":
			return errors.New("--checkpoint-pattern: empty pattern")
		case strings.Contains(strings.TrimSuffix(p, "/"), "/") || p == "/":
			return fmt.Errorf("--checkpoint-pattern %q: a pattern matches a file's name, or a directory's with one \"/\" at its end (ckpt_*/), never a path", p)
		case strings.ContainsAny(p, "\n\r\x00"):
			return fmt.Errorf("--checkpoint-pattern %q contains a control character", p)
		}
		if _, err := path.Match(strings.TrimSuffix(p, "/"), ""); err != nil {
			return fmt.Errorf("--checkpoint-pattern %q: %v", p, err)
		}
	}
	return nil
}

// CheckpointAttemptsPrefix is where the wrapper records one rank's attempts.
func CheckpointAttemptsPrefix(resultsPrefix string, rank int) string {
	return CheckpointRankPrefix(resultsPrefix, rank) + "attempts/"
}

// CheckpointAttemptKey records that pod ran as an attempt of rank. The wrapper writes it when
// the attempt starts, so that an attempt counts even when it archived no log (--no-log-archive,
// or a pod killed before its first upload).
func CheckpointAttemptKey(resultsPrefix string, rank int, pod string) (string, error) {
	if !validPodName(pod) {
		return "", fmt.Errorf("%q is not a pod name", pod)
	}
	return CheckpointAttemptsPrefix(resultsPrefix, rank) + pod, nil
}

// parseCheckpointAttemptKey is the rank and pod of a CheckpointAttemptKey.
func parseCheckpointAttemptKey(resultsPrefix, key string) (rank int, pod string, ok bool) {
	rest, ok := strings.CutPrefix(key, CheckpointsPrefix(resultsPrefix)+"rank-")
	if !ok {
		return 0, "", false
	}
	n, pod, ok := strings.Cut(rest, "/attempts/")
	if !ok || !validPodName(pod) {
		return 0, "", false
	}
	rank, err := strconv.Atoi(n)
	if err != nil || rank < 0 || strconv.Itoa(rank) != n {
		return 0, "", false
	}
	return rank, pod, true
}

// AttemptOf is the number of the attempt pod is of rank, counted as `logs --attempt` counts
// them (LogArchiveAttempts): one per pod of the rank, oldest first, from 1. objs are the
// objects listed under the run's log archive and under the rank's CheckpointAttemptsPrefix: a
// pod is as old as its last write among them, so an attempt that left only its record counts
// too. A pod with nothing written yet (the attempt starting now) comes after every other.
func AttemptOf(resultsPrefix string, rank int, pod string, objs []ArchivedObject) int {
	var archives []ArchivedObject
	last := map[string]time.Time{}
	for _, o := range objs {
		if r, p, ok := parseCheckpointAttemptKey(resultsPrefix, o.Key); ok {
			if r == rank && o.LastModified.After(last[p]) {
				last[p] = o.LastModified
			}
			continue
		}
		archives = append(archives, o)
	}
	type seen struct {
		id      string
		written time.Time
	}
	var pods []seen
	for _, a := range LogArchiveAttempts(resultsPrefix, archives) {
		if a.Rank != rank {
			continue
		}
		id := a.Pod
		if id == "" {
			// An archive named without its pod is an attempt of its own.
			id = "\x00" + a.Key
		}
		if t, ok := last[id]; !ok || a.Written.After(t) {
			last[id] = a.Written
		}
	}
	for id, t := range last {
		pods = append(pods, seen{id, t})
	}
	slices.SortFunc(pods, func(a, b seen) int {
		if c := a.written.Compare(b.written); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	for i, p := range pods {
		if p.id == pod && validPodName(pod) {
			return i + 1
		}
	}
	return len(pods) + 1
}
