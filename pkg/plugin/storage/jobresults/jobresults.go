// Package jobresults finds a job's results in S3 for the commands that read or remove them
// (`results`, `delete-artifacts`, and `logs` and `diagnose` for the log archive): the S3
// credentials, resolved the same way for each, and which run (UID) of a job name is meant, also
// once the Job itself is gone (FindRun), and the run's per-rank log archive (ReadLogs). It never imports cobra; the key layout is s3layout's, the
// transfers s3's.
package jobresults

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Outputs reads the Job's outputs annotation (nil when absent).
func Outputs(job *batchv1.Job) ([]string, error) {
	v, ok := job.Annotations[s3layout.AnnotationOutputs]
	if !ok {
		return nil, nil
	}
	var outs []string
	if err := json.Unmarshal([]byte(v), &outs); err != nil {
		return nil, fmt.Errorf("job.batch/%s: annotation %s is not a JSON array of paths: %w", job.Name, s3layout.AnnotationOutputs, err)
	}
	return outs, nil
}

// HasResults reports whether the Job put anything under its results prefix: the outputs its
// rank 0 uploads (with the log archive), the checkpoints every rank keeps, or the --workdir
// snapshot submit uploaded there. A
// snapshot went through S3 when the Job records both its checksum and staging credentials
// (without S3, it travels in a ConfigMap and the Job has no staging Secret).
func HasResults(job *batchv1.Job) (bool, error) {
	outs, err := Outputs(job)
	if err != nil || len(outs) > 0 {
		return len(outs) > 0, err
	}
	if c, ok, err := Checkpoints(job); err != nil || (ok && !c.OnVolume) {
		return ok, err
	}
	_, snapshot := job.Annotations[s3layout.AnnotationWorkdirSHA256]
	_, staged := job.Annotations[s3layout.AnnotationS3Secret]
	return snapshot && staged, nil
}

// Checkpoints reads the Job's checkpoint settings (annotation s3layout.AnnotationCheckpoints):
// false when it keeps none.
func Checkpoints(job *batchv1.Job) (s3layout.CheckpointSettings, bool, error) {
	v, ok := job.Annotations[s3layout.AnnotationCheckpoints]
	if !ok {
		return s3layout.CheckpointSettings{}, false, nil
	}
	c, err := s3layout.ParseCheckpointSettings(v)
	if err != nil {
		return c, false, fmt.Errorf("job.batch/%s: %w", job.Name, err)
	}
	return c, true, nil
}

// Source is where a command may take S3 credentials from besides a Job's own Secret.
type Source struct {
	// Getenv reads the shell (os.Getenv outside tests).
	Getenv func(string) string
	// Secret is a Secret named on the command line (--s3-secret), read when the shell has no
	// credentials; "" for none.
	Secret string
}

// Credentials resolves and checks the S3 credentials for the results of job name in namespace:
// the shell's when it sets either key, else the Secret of src, else the Secret the Job was
// submitted with (annotation s3layout.AnnotationS3Secret). job is nil when the Job is gone: its
// owned NAME-s3 Secret went with it, so only the shell or src.Secret remain. The second result
// says where they came from ("the environment", "secret/NAME"), never what they are.
func Credentials(ctx context.Context, client kubernetes.Interface, namespace, name string, job *batchv1.Job, src Source) (s3.Config, string, error) {
	cfg, from, err := credentials(ctx, client, namespace, name, job, src)
	if err != nil {
		return cfg, from, err
	}
	return cfg, from, cfg.Check(true, from)
}

func credentials(ctx context.Context, client kubernetes.Interface, namespace, name string, job *batchv1.Job, src Source) (s3.Config, string, error) {
	if src.Getenv(s3layout.EnvAccessKey) != "" || src.Getenv(s3layout.EnvSecretKey) != "" {
		return s3.ConfigFromEnv(src.Getenv), "the environment", nil
	}
	envHint := fmt.Sprintf("set %s in the shell", strings.Join(s3layout.CredentialKeys, ", "))
	secret, whose := src.Secret, "--s3-secret"
	switch {
	case secret != "":
	case job == nil:
		return s3.Config{}, "", exitcode.Usagef("job.batch/%s is gone, and its S3 Secret with it: %s, or name a Secret with --s3-secret", name, envHint)
	default:
		secret, whose = job.Annotations[s3layout.AnnotationS3Secret], "job.batch/"+job.Name
		if secret == "" {
			return s3.Config{}, "", exitcode.Usagef("job.batch/%s names no S3 Secret (annotation %s): %s", job.Name, s3layout.AnnotationS3Secret, envHint)
		}
	}
	sec, err := client.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && src.Secret != "":
		// Named by the user, perhaps never there (a typo, another namespace): not "gone".
		return s3.Config{}, "", exitcode.WithCode(exitcode.NotFound, fmt.Errorf("--s3-secret: secret %q not found in namespace %q: %s, or name a Secret of that namespace", secret, namespace, envHint))
	case apierrors.IsNotFound(err):
		return s3.Config{}, "", exitcode.WithCode(exitcode.NotFound, fmt.Errorf("secret/%s with the S3 credentials of %s is gone: %s", secret, whose, envHint))
	case apierrors.IsForbidden(err):
		return s3.Config{}, "", exitcode.WithCode(exitcode.Forbidden, fmt.Errorf("reading secret/%s with the S3 credentials of %s: %w\n(or %s)", secret, whose, err, envHint))
	case err != nil:
		return s3.Config{}, "", fmt.Errorf("reading secret/%s: %w", secret, err)
	}
	return s3.ConfigFromSecretData(sec.Data), "secret/" + secret, nil
}

// Run is one run of a job name: the objects under results/<name>/<uid>/.
type Run struct {
	UID     string `json:"uid"`
	Objects int    `json:"objects"`
	Bytes   int64  `json:"bytes"`
	// LastModified is the newest object's: when the run last wrote.
	LastModified time.Time `json:"lastModified"`
}

// Runs groups the objects listed under runsPrefix (s3layout.RunsPrefix) by run, oldest run
// (by last write) first. Keys that belong to no run are ignored.
func Runs(runsPrefix string, objs []s3.Object) []Run {
	byUID := map[string]*Run{}
	for _, o := range objs {
		uid := s3layout.RunUID(runsPrefix, o.Key)
		if uid == "" {
			continue
		}
		r := byUID[uid]
		if r == nil {
			r = &Run{UID: uid}
			byUID[uid] = r
		}
		r.Objects++
		r.Bytes += o.Size
		if o.LastModified.After(r.LastModified) {
			r.LastModified = o.LastModified
		}
	}
	out := make([]Run, 0, len(byUID))
	for _, r := range byUID {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Run) int {
		if c := a.LastModified.Compare(b.LastModified); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
	return out
}

// ListRuns lists every run of job name in bucket.
func ListRuns(ctx context.Context, client *minio.Client, bucket, name string) ([]Run, error) {
	prefix, err := s3layout.RunsPrefix(name)
	if err != nil {
		return nil, exitcode.WithCode(exitcode.Usage, err)
	}
	objs, err := s3.List(ctx, client, bucket, prefix)
	if err != nil {
		return nil, s3.Describe(err, "listing", "s3://"+bucket+"/"+prefix)
	}
	return Runs(prefix, objs), nil
}

// PickRun says which run of job name is meant when the Job is gone and no --uid was given:
// the only one. None is NotFound; several are a usage error that lists them, newest last, so
// that the user can pick one with --uid. where is the s3:// URL of the runs, for messages.
func PickRun(name, where string, runs []Run) (string, error) {
	switch len(runs) {
	case 0:
		return "", exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s not found, and it has no results under %s", name, where))
	case 1:
		return runs[0].UID, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "job.batch/%s is gone and has %d runs under %s: pick one with --uid:", name, len(runs), where)
	for _, r := range runs {
		fmt.Fprintf(&b, "\n  --uid %s  (%s, %s, last written %s)", r.UID, plural.N(r.Objects, "object"), s3.HumanBytes(r.Bytes), r.LastModified.UTC().Format(time.RFC3339))
	}
	return "", exitcode.WithCode(exitcode.Usage, fmt.Errorf("%s", b.String()))
}

// Store is a connection to the bucket that holds a job's results.
type Store struct {
	Bucket string
	Client *minio.Client
}

// Lookup names the run of a job that a command reads: the job name in Namespace, its Job (nil
// when gone), the run's UID (--uid; "" for the Job's own, or the only run when the Job is gone)
// and where the credentials may come from besides the Job's Secret.
type Lookup struct {
	Namespace string
	Name      string
	Job       *batchv1.Job
	UID       string
	Source    Source
}

// Connect resolves the credentials of l's job (see Credentials) and makes the S3 client; l.UID
// plays no part.
func Connect(ctx context.Context, client kubernetes.Interface, l Lookup) (Store, error) {
	cfg, _, err := Credentials(ctx, client, l.Namespace, l.Name, l.Job, l.Source)
	if err != nil {
		return Store{}, err
	}
	c, err := s3.NewClient(cfg, nil)
	if err != nil {
		return Store{}, err
	}
	return Store{Bucket: cfg.Bucket, Client: c}, nil
}

// URL is the s3:// URL of key in the store's bucket.
func (s Store) URL(key string) string { return "s3://" + s.Bucket + "/" + key }

// ValidateUID checks a run named with --uid before anything is sent to the cluster: with job
// name it must make a results prefix (s3layout.ResultsPrefix), so that it addresses exactly one
// run of that name. "" (no --uid) passes. `logs`, `results` and `diagnose` take --uid.
func ValidateUID(name, uid string) error {
	if uid == "" {
		return nil
	}
	if _, err := s3layout.ResultsPrefix(name, uid); err != nil {
		return exitcode.Usagef("--uid: %w", err)
	}
	return nil
}

// RunRef is a run found in S3: the bucket holding it, its UID and its results prefix.
type RunRef struct {
	Store
	UID    string
	Prefix string
}

// ConnectError is an error of FindRun's first step, connecting to the bucket (no credentials,
// a Secret that cannot be read): a command that falls back when there are no credentials tells
// it from a run that is not there. Its text is its cause's.
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// FindRun is what `logs`, `diagnose` and `results` do first: connect to the bucket of l's job
// (Connect; its errors come as a *ConnectError), then resolve which run is meant (Store.Run).
func FindRun(ctx context.Context, client kubernetes.Interface, l Lookup) (RunRef, error) {
	store, err := Connect(ctx, client, l)
	if err != nil {
		return RunRef{}, &ConnectError{Err: err}
	}
	uid, prefix, err := store.Run(ctx, l.Name, l.Job, l.UID)
	if err != nil {
		return RunRef{}, err
	}
	return RunRef{Store: store, UID: uid, Prefix: prefix}, nil
}

// ReadLogs reads the run's log archive (see ReadLogArchive): only ranks when given, only the
// attempt-th attempt of each rank when attempt > 0.
func (r RunRef) ReadLogs(ctx context.Context, ranks []int, attempt int) ([]tail.ArchivedLog, error) {
	return ReadLogArchive(ctx, r.Client, r.Bucket, r.Prefix, ranks, attempt)
}

// LogArchiveURL is the s3:// URL of the run's log archive, for messages.
func (r RunRef) LogArchiveURL() string { return r.URL(s3layout.LogArchivePrefix(r.Prefix)) }

// Run resolves which run of job name is meant and returns its UID and results prefix: uid
// when given (--uid), else the Job's own, else, when the Job is gone, the only run in S3
// (PickRun).
func (s Store) Run(ctx context.Context, name string, job *batchv1.Job, uid string) (string, string, error) {
	if uid == "" && job != nil {
		uid = string(job.UID)
	}
	if uid == "" {
		runs, err := ListRuns(ctx, s.Client, s.Bucket, name)
		if err != nil {
			return "", "", err
		}
		runsPrefix, _ := s3layout.RunsPrefix(name) // ListRuns checked the name
		if uid, err = PickRun(name, s.URL(runsPrefix), runs); err != nil {
			return "", "", err
		}
	}
	prefix, err := s3layout.ResultsPrefix(name, uid)
	if err != nil {
		return "", "", exitcode.WithCode(exitcode.Usage, err)
	}
	return uid, prefix, nil
}
