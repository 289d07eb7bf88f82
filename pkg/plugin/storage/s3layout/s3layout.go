// Package s3layout holds the pure rules of S3 data staging shared by `submit` (which wires a
// Job for it, through jobspec), the in-pod `stage in`/`stage out` commands and `delete-artifacts`
// (which move and remove the data, through the S3 client package s3): the names that travel
// between them, the s3:// URL grammar and the job-scoped results layout, with the checkpoints
// kept there (checkpoint.go: their keys, manifest, restore plan, resume choice, retention and
// attempt number). No client, no environment.
package s3layout

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The credential variables, named as the SDK names them. In a pod they come only from a
// Secret through secretKeyRef; on a laptop from the submitting shell.
const (
	EnvAccessKey = "ACCESS_KEY"
	EnvSecretKey = "SECRET_KEY"
	EnvBucket    = "S3_BUCKET_NAME"
	EnvEndpoint  = "S3_ENDPOINT_URL"
)

// CredentialKeys are the Secret keys (and env names) staging reads; the endpoint is optional
// (AWS needs none).
var CredentialKeys = []string{EnvAccessKey, EnvSecretKey, EnvBucket, EnvEndpoint}

// What the pod's wrapper hands to `kubectl-tao stage in|out` (plain values: no secrets).
const (
	// EnvInputs is one "CONTAINER_PATH=s3://BUCKET/KEY" per line.
	EnvInputs = "TAO_STAGE_INPUTS"
	// EnvOutputs is one absolute container path per line.
	EnvOutputs = "TAO_STAGE_OUTPUTS"
	// EnvJobID is the Job's name, as the SDK's TAO_JOB_ID.
	EnvJobID = "TAO_JOB_ID"
	// EnvJobUID is the Job's UID, read through the downward API from the pod label the Job
	// controller sets to it (batchv1.ControllerUidLabel).
	EnvJobUID = "TAO_JOB_UID"
	// EnvPodName is the pod's own name, read through the downward API (metadata.name): it
	// tells one attempt's log archive from another's (LogArchiveKey).
	EnvPodName = "TAO_POD_NAME"
)

// The pod layout: an init container copies the static binary into a shared emptyDir, from
// where the main container's wrapper runs it.
const (
	StagerContainer = "tao-stager"
	StagerVolume    = "tao-stager"
	StagerDir       = "/tao-stager"
	StagerBinary    = StagerDir + "/kubectl-tao"
	// StagerImageBinary is where the stager image keeps the binary (a FROM scratch image).
	StagerImageBinary = "/kubectl-tao"
)

// Annotations submit writes on the Job so that later commands know how it was staged.
const (
	// AnnotationOutputs is the JSON array of --output container paths.
	AnnotationOutputs = "kubectl-tao.dev/outputs"
	// AnnotationS3Secret names the Secret holding the staging credentials.
	AnnotationS3Secret = "kubectl-tao.dev/s3-secret"
	// AnnotationWorkdirSHA256 is the SHA-256 of the --workdir archive the Job runs.
	AnnotationWorkdirSHA256 = "kubectl-tao.dev/workdir-sha256"
	// AnnotationCheckpoints is the JSON CheckpointSettings of --checkpoint-dir.
	AnnotationCheckpoints = "kubectl-tao.dev/checkpoints"
)

// The --workdir snapshot: where it travels and how a pod tells which one it runs.
const (
	// EnvWorkdirSHA256 carries the archive's SHA-256 in every container of the pod.
	EnvWorkdirSHA256 = "TAO_WORKDIR_SHA256"
	// WorkdirArchive is the archive's name: a ConfigMap key, and the last part of WorkdirKey.
	WorkdirArchive = "workdir.tar.zst"
)

// WorkdirKey is where a run's --workdir archive lives in S3, below the run's results prefix so
// that `results` and `delete-artifacts` treat it like any other object of the run.
func WorkdirKey(jobName, uid string) (string, error) {
	prefix, err := ResultsPrefix(jobName, uid)
	if err != nil {
		return "", err
	}
	return prefix + ".kubectl-tao/" + WorkdirArchive, nil
}

// SecretName is the Secret submit creates (owned by the Job) from the shell's credentials.
func SecretName(job string) string { return job + "-s3" }

// URL is a parsed s3://BUCKET/KEY. A key ending in "/" is a prefix (a directory).
type URL struct {
	Bucket string
	Key    string
}

// IsPrefix reports whether the URL names every object under a prefix.
func (u URL) IsPrefix() bool { return u.Key == "" || strings.HasSuffix(u.Key, "/") }

func (u URL) String() string { return "s3://" + u.Bucket + "/" + u.Key }

// ParseURL parses s3://BUCKET/KEY. The bucket must be a valid S3 bucket name; the key may not
// contain "." or ".." segments or empty segments ("a//b"), which S3 would accept and a file
// system would not map back.
func ParseURL(s string) (URL, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return URL{}, fmt.Errorf("%q is not an s3:// URL (want s3://BUCKET/KEY)", s)
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if err := validateBucket(bucket); err != nil {
		return URL{}, fmt.Errorf("%q: %w", s, err)
	}
	if key == "" {
		return URL{}, fmt.Errorf("%q names no key: give s3://%s/KEY, or s3://%s/PREFIX/ for a directory", s, bucket, bucket)
	}
	if strings.ContainsAny(key, "\n\r\x00") {
		return URL{}, fmt.Errorf("%q: the key contains a control character", s)
	}
	segs := strings.Split(strings.TrimSuffix(key, "/"), "/")
	for _, seg := range segs {
		switch seg {
		case "":
			return URL{}, fmt.Errorf("%q: the key has an empty segment (\"//\" or a leading \"/\")", s)
		case ".", "..":
			return URL{}, fmt.Errorf("%q: the key may not contain %q segments", s, seg)
		}
	}
	return URL{Bucket: bucket, Key: key}, nil
}

// validateBucket applies S3's bucket naming rules (3-63 characters of a-z, 0-9, "." and "-",
// starting and ending with a letter or digit).
func validateBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (c == '.' || c == '-') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("bucket name %q may hold only a-z, 0-9, '.' and '-', and must start and end with a letter or digit", b)
		}
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q may not contain \"..\"", b)
	}
	return nil
}

// ValidateBucket is validateBucket for S3_BUCKET_NAME given in the shell or a Secret.
func ValidateBucket(b string) error { return validateBucket(b) }

// ValidateContainerPath accepts an absolute, clean path that is not "/" and has no "..",
// newline or NUL (paths travel one per line).
func ValidateContainerPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty container path")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("container path %q must be absolute", p)
	case strings.ContainsAny(p, "\n\r\x00"):
		return fmt.Errorf("container path %q contains a control character", p)
	case p == "/":
		return errors.New(`container path "/" would stage the whole file system`)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == ".." {
			return fmt.Errorf("container path %q may not contain \"..\"", p)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("container path %q is not clean (want %q)", p, path.Clean(p))
	}
	return nil
}

// ToolDir is the directory, under a run's results prefix, that holds the tool's own objects
// (the per-rank log archive, the code snapshot). No output may map into it, or a user's file
// could overwrite an archived log (and `results` could not tell them apart).
const ToolDir = ".kubectl-tao"

// CleanOutputPath accepts the SDK's own spelling of a directory output, with a trailing slash
// ("/results/"), as the same directory; everything else is left for ValidateOutputPath to judge
// ("/" and "//" are "/", "/a/../b/" still has its "..").
func CleanOutputPath(p string) string {
	t := strings.TrimRight(p, "/")
	if t == "" && p != "" {
		return "/"
	}
	return t
}

// ValidateOutputPath is ValidateContainerPath for an --output-path, which may also not be (or be
// under) /.kubectl-tao: its key would land among the tool's own objects.
func ValidateOutputPath(p string) error {
	if err := ValidateContainerPath(p); err != nil {
		return err
	}
	if p == "/"+ToolDir || strings.HasPrefix(p, "/"+ToolDir+"/") {
		return fmt.Errorf("container path %q is under /%s, where the results keep the tool's own objects (the log archive)", p, ToolDir)
	}
	return nil
}

// Input is one --input CONTAINER_PATH=s3://BUCKET/KEY.
type Input struct {
	Path   string
	Source URL
}

// ParseInput parses CONTAINER_PATH=s3://BUCKET/KEY. A prefix source (key ending in "/") is
// downloaded as a directory at the path; an object source becomes the file at the path.
func ParseInput(s string) (Input, error) {
	p, u, ok := strings.Cut(s, "=")
	if !ok {
		return Input{}, fmt.Errorf("--input %q: want CONTAINER_PATH=s3://BUCKET/KEY", s)
	}
	if err := ValidateContainerPath(p); err != nil {
		return Input{}, fmt.Errorf("--input %q: %w", s, err)
	}
	src, err := ParseURL(u)
	if err != nil {
		return Input{}, fmt.Errorf("--input %q: %w", s, err)
	}
	return Input{Path: p, Source: src}, nil
}

func (in Input) String() string { return in.Path + "=" + in.Source.String() }

// EncodeInputs is the EnvInputs value for inputs.
func EncodeInputs(ins []Input) string {
	lines := make([]string, len(ins))
	for i, in := range ins {
		lines[i] = in.String()
	}
	return strings.Join(lines, "\n")
}

// DecodeInputs parses an EnvInputs value; blank lines are ignored.
func DecodeInputs(v string) ([]Input, error) {
	var out []Input
	for _, l := range strings.Split(v, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		in, err := ParseInput(l)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// EncodeOutputs is the EnvOutputs value for output paths.
func EncodeOutputs(paths []string) string { return strings.Join(paths, "\n") }

// DecodeOutputs parses an EnvOutputs value; blank lines are ignored.
func DecodeOutputs(v string) ([]string, error) {
	var out []string
	for _, l := range strings.Split(v, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if err := ValidateOutputPath(l); err != nil {
			return nil, fmt.Errorf("--output: %w", err)
		}
		out = append(out, l)
	}
	return out, nil
}

// ResultsPrefix is the job-scoped prefix of one run: results/<job-name>/<job-uid>/. Both parts
// are required, so that no caller can ever address (and delete) another run's results.
func ResultsPrefix(jobName, uid string) (string, error) {
	runs, err := RunsPrefix(jobName)
	if err != nil {
		return "", err
	}
	if err := prefixPart("job UID", uid); err != nil {
		return "", err
	}
	return runs + uid + "/", nil
}

// RunsPrefix is results/<job-name>/: every run of a job name, one results prefix per UID below
// it. Only listing uses it (`results --all-runs`, and finding the run of a Job that is gone).
func RunsPrefix(jobName string) (string, error) {
	if err := prefixPart("job name", jobName); err != nil {
		return "", err
	}
	return "results/" + jobName + "/", nil
}

// RunUID is the UID of the run a key under RunsPrefix(jobName) belongs to ("" if none).
func RunUID(runsPrefix, key string) string {
	rest, ok := strings.CutPrefix(key, runsPrefix)
	if !ok {
		return ""
	}
	uid, _, ok := strings.Cut(rest, "/")
	if !ok || prefixPart("job UID", uid) != nil {
		return ""
	}
	return uid
}

func prefixPart(what, v string) error {
	if v == "" || strings.ContainsAny(v, "/\n\x00") || v == "." || v == ".." {
		return fmt.Errorf("invalid %s %q for a results prefix", what, v)
	}
	return nil
}

// LogArchivePrefix is where a run's per-rank log archive lives, under its results prefix:
// <prefix>.kubectl-tao/logs/.
func LogArchivePrefix(resultsPrefix string) string { return resultsPrefix + ToolDir + "/logs/" }

// LogArchiveRankPrefix is where one rank's archived logs are: every LogArchiveKey of rank, and
// no other rank's ("rank-1." is not a prefix of rank 10's keys).
func LogArchiveRankPrefix(resultsPrefix string, rank int) string {
	return LogArchivePrefix(resultsPrefix) + "rank-" + strconv.Itoa(rank) + "."
}

// LogArchiveKey is the archived log of one attempt of one rank of a run:
// <prefix>.kubectl-tao/logs/rank-<N>.<pod>.log. The in-pod wrapper uploads it; `logs`,
// `diagnose` and `results` read it once the pods are gone.
//
// Each attempt of a rank (--retries) is a new pod, so the pod's name, which the pod reads from
// the downward API (EnvPodName), keeps the attempts apart: none overwrites another. A number
// would need the attempt count, which only an Indexed Job with backoffLimitPerIndex gives its
// pods (a one-node job is not Indexed). Attempts are ordered by their last write instead
// (LogArchiveAttempts): a rank's attempts never overlap (podReplacementPolicy Failed).
// An empty or invalid pod gives rank-<N>.log, the key of archives written before attempts
// were kept apart (one object per rank, the latest attempt's).
func LogArchiveKey(resultsPrefix string, rank int, pod string) string {
	name := "rank-" + strconv.Itoa(rank)
	if validPodName(pod) {
		name += "." + pod
	}
	return LogArchivePrefix(resultsPrefix) + name + ".log"
}

// LogArchiveEntry is what a key LogArchiveKey made says: the rank and the pod of the attempt
// ("" for an archive of before attempts were kept apart).
type LogArchiveEntry struct {
	Rank int
	Pod  string
}

// ParseLogArchiveKey reads back a key LogArchiveKey made under resultsPrefix, and false for
// any other key.
func ParseLogArchiveKey(resultsPrefix, key string) (LogArchiveEntry, bool) {
	name, ok := strings.CutPrefix(key, LogArchivePrefix(resultsPrefix))
	if !ok {
		return LogArchiveEntry{}, false
	}
	n, ok := strings.CutPrefix(name, "rank-")
	if !ok {
		return LogArchiveEntry{}, false
	}
	n, ok = strings.CutSuffix(n, ".log")
	if !ok {
		return LogArchiveEntry{}, false
	}
	n, pod, dotted := strings.Cut(n, ".")
	if dotted && !validPodName(pod) {
		return LogArchiveEntry{}, false
	}
	if n == "" || (len(n) > 1 && n[0] == '0') {
		return LogArchiveEntry{}, false
	}
	rank, err := strconv.Atoi(n)
	if err != nil || rank < 0 || strconv.Itoa(rank) != n {
		return LogArchiveEntry{}, false
	}
	return LogArchiveEntry{Rank: rank, Pod: pod}, true
}

// validPodName accepts what Kubernetes accepts as a pod name (a DNS-1123 subdomain: at most
// 253 characters of a-z, 0-9, '-' and '.', starting and ending with a letter or digit), which
// is all a key segment needs: no '/', nothing a file system or a listing would trip on.
func validPodName(pod string) bool {
	if pod == "" || len(pod) > 253 {
		return false
	}
	for i, c := range pod {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(pod)-1 || c != '-' && c != '.') {
			return false
		}
	}
	return true
}

// LogArchiveAttempt is one archived attempt of one rank: the object and where it stands.
type LogArchiveAttempt struct {
	LogArchiveEntry
	Key string
	// Attempt counts a rank's attempts from 1, oldest first.
	Attempt int
	// Written is the object's last write: when the attempt last logged (or ended).
	Written time.Time
}

// ArchivedObject is what LogArchiveAttempts needs of a listed object.
type ArchivedObject struct {
	Key          string
	LastModified time.Time
}

// LogArchiveAttempts picks the archived logs out of the objects listed under resultsPrefix,
// in rank order and, within a rank, oldest attempt first, numbered from 1. An attempt is as
// old as its last write: a rank's attempts run one after the other (the next pod starts once
// the last has ended), so the later attempt wrote last. Keys break ties.
func LogArchiveAttempts(resultsPrefix string, objs []ArchivedObject) []LogArchiveAttempt {
	var out []LogArchiveAttempt
	for _, o := range objs {
		if e, ok := ParseLogArchiveKey(resultsPrefix, o.Key); ok {
			out = append(out, LogArchiveAttempt{LogArchiveEntry: e, Key: o.Key, Written: o.LastModified})
		}
	}
	slices.SortFunc(out, func(a, b LogArchiveAttempt) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		if c := a.Written.Compare(b.Written); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	for i := range out {
		out[i].Attempt = 1
		if i > 0 && out[i-1].Rank == out[i].Rank {
			out[i].Attempt = out[i-1].Attempt + 1
		}
	}
	return out
}

// OutputKey is the object key for an output: the results prefix joined with the container
// path without its leading slash. A file output is that one object; a directory output's files
// go below it, at OutputKey + "/" + their path relative to the directory.
func OutputKey(jobName, uid, containerPath string) (string, error) {
	prefix, err := ResultsPrefix(jobName, uid)
	if err != nil {
		return "", err
	}
	if err := ValidateContainerPath(containerPath); err != nil {
		return "", err
	}
	return prefix + strings.TrimPrefix(containerPath, "/"), nil
}

// PublishedImage is the repository of the project's stager images, one tag per release.
const PublishedImage = "ghcr.io/kubectl-tao/kubectl-tao"

// releaseVersion matches what a release is tagged: vMAJOR.MINOR.PATCH, optionally -rc.N. A
// build from an untagged commit (v0.0.0-dev, v0.0.0-<commit>, v1.2.3-4-g<commit>, -dirty) has
// no published image.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-rc\.[0-9]+)?$`)

// DefaultStagerImage is the published stager image for a binary of this version, and false for
// a development build, which has none: it must name one (built with `make stager-image`).
func DefaultStagerImage(version string) (string, bool) {
	if !releaseVersion.MatchString(version) || strings.HasPrefix(version, "v0.0.0") {
		return "", false
	}
	return PublishedImage + ":" + version, true
}

// Exit codes the staged container's wrapper gives its own failures, instead of the stager's
// (kubectl-tao's table: 2 usage, 3 not found, 6 denied...), which would pass for the training
// command's: with --retries, the pod failure policy would rerun the whole GPU job for a failed
// upload (3) or call a stager usage error "the command cannot run" (2). They sit above the
// signal codes (128+N, up to 192) where programs rarely go; the policy fails the Job on them at
// once, and diagnose names them as staging failures. The stager's own code is on stderr.
const (
	// ExitStageIn: stage in (or the restore of kept checkpoints) failed; the command did not run.
	ExitStageIn = 201
	// ExitStageOut: the command succeeded, but stage out failed: its outputs were not uploaded.
	ExitStageOut = 202
	// ExitStageRun: `stage run`, which runs the command and archives its log, could not start
	// (a usage error of the wrapper's own call).
	ExitStageRun = 203
)

// StagingExitCodes are the wrapper's own failure codes, in order.
var StagingExitCodes = []int32{ExitStageIn, ExitStageOut, ExitStageRun}

// StagingFailure says what a wrapper exit code means, and false for any other code.
func StagingFailure(code int32) (string, bool) {
	switch code {
	case ExitStageIn:
		return "stage in failed: the inputs or the kept checkpoints were not downloaded and the command did not run", true
	case ExitStageOut:
		return "stage out failed: the command succeeded but its outputs were not uploaded", true
	case ExitStageRun:
		return "the staging wrapper could not start the command's log archiver (stage run)", true
	}
	return "", false
}
