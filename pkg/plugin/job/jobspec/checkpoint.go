package jobspec

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Checkpoints is --checkpoint-dir: the files the command writes under Dir are kept in S3 per
// rank while it runs and restored into Dir at the start of every attempt of every rank, by
// `stage run` (the checkpoint package), which then runs the command on every rank.
type Checkpoints struct {
	// Dir is the directory in the container, absolute and clean.
	Dir string
	// Keep is how many complete checkpoints stay in S3 (--checkpoint-keep).
	Keep int
	// Patterns are the names of checkpoint files (--checkpoint-pattern); nil is
	// s3layout.DefaultCheckpointPatterns.
	Patterns []string
	// FromJob and FromUID name an earlier run whose checkpoints the first attempt restores
	// (--resume-from, --resume-from-uid, resolved by submit); "" for none.
	FromJob, FromUID string
}

// DefaultTerminationGracePeriod is Kubernetes' own default for a pod.
const DefaultTerminationGracePeriod = 30 * time.Second

// checkpointEnv are the variables `stage run` reads and tells the command; --env may not set
// them.
var checkpointEnv = []string{
	s3layout.EnvStageCheckpointDir, s3layout.EnvStageCheckpointKeep, s3layout.EnvStageCheckpointPatterns,
	s3layout.EnvStageGracePeriod, s3layout.EnvStageCheckpointFrom, s3layout.EnvStageCheckpointOnVolume, s3layout.EnvCheckpointDir, s3layout.EnvAttempt, s3layout.EnvResumeCheckpoint,
}

// gracePeriod is the pod's termination grace period: the flag's, or Kubernetes' default.
func (s *Spec) gracePeriod() time.Duration {
	if s.TerminationGracePeriod != nil {
		return *s.TerminationGracePeriod
	}
	return DefaultTerminationGracePeriod
}

// checkpointEnvVars are `stage run`'s checkpoint settings, plain values: a path, a count, the
// patterns one per line, and the grace period its last upload must fit in.
func checkpointEnvVars(s Spec) []corev1.EnvVar {
	c := s.Staging.Checkpoints
	env := []corev1.EnvVar{
		{Name: s3layout.EnvStageCheckpointDir, Value: EscapeKubelet(c.Dir)},
		{Name: s3layout.EnvStageCheckpointKeep, Value: strconv.Itoa(c.Keep)},
	}
	if c.Patterns != nil {
		env = append(env, corev1.EnvVar{Name: s3layout.EnvStageCheckpointPatterns, Value: EscapeKubelet(strings.Join(c.Patterns, "\n"))})
	}
	if c.FromJob != "" {
		env = append(env, corev1.EnvVar{Name: s3layout.EnvStageCheckpointFrom, Value: c.FromJob + "/" + c.FromUID})
	}
	if OnVolume(c.Dir, s.Volumes) {
		env = append(env, corev1.EnvVar{Name: s3layout.EnvStageCheckpointOnVolume, Value: "1"})
	}
	return append(env, gracePeriodEnv(s))
}

// gracePeriodEnv tells the supervisor the pod's grace period, which its budget splits.
func gracePeriodEnv(s Spec) corev1.EnvVar {
	return corev1.EnvVar{Name: s3layout.EnvStageGracePeriod, Value: strconv.FormatInt(int64(s.gracePeriod()/time.Second), 10)}
}

// validateCheckpoints checks --checkpoint-dir against the other paths of the container.
func (s *Spec) validateCheckpoints() []error {
	c := s.Staging.Checkpoints
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := s3layout.ValidateCheckpointDir(c.Dir); err != nil {
		return []error{err}
	}
	if c.Keep < 1 {
		add("invalid --checkpoint-keep %d: at least the newest checkpoint must be kept", c.Keep)
	}
	if c.Patterns != nil {
		if err := s3layout.ValidateCheckpointPatterns(c.Patterns); err != nil {
			errs = append(errs, err)
		}
	}
	if c.FromJob != "" || c.FromUID != "" {
		if _, err := s3layout.ResultsPrefix(c.FromJob, c.FromUID); err != nil {
			add("--resume-from %s: %w", c.FromJob, err)
		}
	}
	if under(c.Dir, s3layout.StagerDir) || under(s3layout.StagerDir, c.Dir) {
		add("--checkpoint-dir %s: the path %s is reserved for the stager binary", c.Dir, s3layout.StagerDir)
	}
	for _, in := range s.Staging.Inputs {
		if under(c.Dir, in.Path) || under(in.Path, c.Dir) {
			add("--checkpoint-dir %s and --input %s overlap: the restore and the download would write the same files", c.Dir, in.Path)
		}
	}
	if w := s.Workdir; w != nil {
		if m := path.Clean(w.MountPath); under(c.Dir, m) || under(m, c.Dir) {
			add("--checkpoint-dir %s and --workdir-mount %s overlap: a restore would write the last run's files into this run's code; "+
				"keep the checkpoints outside the working directory", c.Dir, m)
		}
	}
	for _, f := range s.Files {
		if p := path.Clean(f.ContainerPath); under(c.Dir, p) || under(p, c.Dir) {
			add("--checkpoint-dir %s overlaps --file %s, which is mounted read-only", c.Dir, p)
		}
	}
	for _, v := range s.Volumes {
		m := path.Clean(v.MountPath)
		switch {
		case under(c.Dir, m) && v.ReadOnly:
			add("--checkpoint-dir %s is on the read-only --volume %s:%s", c.Dir, v.Claim, m)
		case under(c.Dir, m) && c.FromJob != "":
			add("--resume-from restores from S3, and --checkpoint-dir %s is on --volume %s:%s, which keeps its own: "+
				"copy the old run's checkpoints onto the volume instead", c.Dir, v.Claim, m)
		case under(m, c.Dir) && m != c.Dir:
			add("--checkpoint-dir %s holds the mount of --volume %s:%s: its files would be uploaded and restored over the volume", c.Dir, v.Claim, m)
		}
	}
	return errs
}

// OnVolume reports whether dir is on one of volumes (a writable --volume): such a volume
// keeps the checkpoints across attempts by itself, and nothing is copied to S3.
func OnVolume(dir string, volumes []Volume) bool {
	for _, v := range volumes {
		if !v.ReadOnly && under(dir, path.Clean(v.MountPath)) {
			return true
		}
	}
	return false
}

// validateGracePeriod checks --termination-grace-period.
func (s *Spec) validateGracePeriod() []error {
	if s.TerminationGracePeriod == nil {
		return nil
	}
	g := *s.TerminationGracePeriod
	switch {
	case g < time.Second:
		return []error{fmt.Errorf("invalid --termination-grace-period %s: at least 1s (0 kills the pod at once, before anything is saved)", g)}
	case g%time.Second != 0:
		return []error{fmt.Errorf("invalid --termination-grace-period %s: must be a whole number of seconds", g)}
	case g/time.Second > 1<<31-1:
		return []error{fmt.Errorf("invalid --termination-grace-period %s: too long", g)}
	}
	return nil
}
