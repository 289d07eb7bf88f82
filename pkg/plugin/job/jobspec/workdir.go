package jobspec

import (
	"fmt"
	"path"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// The pod layout of --workdir: an init container from the stager image unpacks the archive
// into an emptyDir that the main container mounts at the mount path and runs in.
const (
	// DefaultWorkdirMount is --workdir-mount's default.
	DefaultWorkdirMount = "/workspace"
	// WorkdirContainer is the init container that unpacks the archive.
	WorkdirContainer = "tao-workdir"
	// WorkdirVolume is the emptyDir the archive is unpacked into.
	WorkdirVolume = "tao-workdir"
	// WorkdirArchiveVolume is the ConfigMap volume carrying the archive, in the init container
	// only, at WorkdirArchiveDir.
	WorkdirArchiveVolume = "tao-workdir-archive"
	WorkdirArchiveDir    = "/tao-workdir-archive"
)

// Workdir is `--workdir DIR`: a snapshot of a local directory, already packed, unpacked into
// MountPath on every rank before the command runs, which runs there.
type Workdir struct {
	// MountPath is where the snapshot appears, and the command's working directory.
	MountPath string
	// SHA256 is the archive's hex digest: the pod's TAO_WORKDIR_SHA256 and the unpacker's check.
	SHA256 string
	// Archive travels in the ConfigMap WorkdirConfigMapName(job), owned by the Job. It is nil
	// when the archive goes through S3 instead: submit uploads it to s3layout.WorkdirKey while
	// the Job is suspended, and the pod fetches it with the staging credentials (Spec.Staging).
	Archive []byte
	// StagerImage holds the static kubectl-tao binary that unpacks (see Staging.StagerImage).
	StagerImage string
}

// InS3 reports whether the archive travels through S3 rather than in a ConfigMap.
func (w *Workdir) InS3() bool { return w.Archive == nil }

// WorkdirConfigMapName names the ConfigMap that carries a job's --workdir archive.
func WorkdirConfigMapName(job string) string { return job + "-workdir" }

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Spec) validateWorkdir() []error {
	w := s.Workdir
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, kv := range s.Env {
		if kv.Key == s3layout.EnvWorkdirSHA256 {
			add("invalid --env %q: kubectl-tao sets it to the --workdir archive's checksum", kv.Key)
		}
	}
	for _, kv := range s.Annotations {
		if kv.Key == s3layout.AnnotationWorkdirSHA256 {
			add("invalid --annotation %q: the key is reserved for kubectl-tao", kv.Key)
		}
	}
	if w == nil {
		return errs
	}
	if err := validateMountPath("workdir-mount", w.MountPath); err != nil {
		return append(errs, err)
	}
	m := path.Clean(w.MountPath)
	if under(m, s3layout.StagerDir) || under(s3layout.StagerDir, m) || under(m, WorkdirArchiveDir) || under(WorkdirArchiveDir, m) {
		add("--workdir-mount %s: the paths %s and %s are reserved for kubectl-tao", m, s3layout.StagerDir, WorkdirArchiveDir)
	}
	for _, v := range s.Volumes {
		if path.Clean(v.MountPath) == m {
			add("--workdir-mount %s: the path is already mounted by --volume %s", m, v.Claim)
		}
	}
	for _, f := range s.Files {
		if path.Clean(f.ContainerPath) == m {
			add("--workdir-mount %s: the path is already mounted by --file", m)
		}
	}
	if !sha256Hex.MatchString(w.SHA256) {
		add("internal error: --workdir checksum %q is not a hex SHA-256", w.SHA256)
	}
	switch {
	case w.InS3() && s.Staging == nil:
		add("internal error: the --workdir archive goes through S3 but the job has no S3 staging")
	case !w.InS3() && len(w.Archive) > MaxFilesBytes:
		add("--workdir: the archive is %d bytes, more than the %d a ConfigMap can hold: configure S3 staging "+
			"(ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME in this shell, or --s3-secret) to ship it through S3, "+
			"or leave files out with a .taoignore", len(w.Archive), MaxFilesBytes)
	}
	if w.StagerImage == "" {
		add("--stager-image is empty")
	}
	return errs
}

// addWorkdir adds the unpacking init container, its volumes, the main container's mount,
// working directory and TAO_WORKDIR_SHA256, the Job's checksum annotation, and the archive's
// ConfigMap unless it goes through S3.
func addWorkdir(s Spec, objs *Objects) {
	w := s.Workdir
	job := objs.Job
	pod := &job.Spec.Template.Spec
	main := &pod.Containers[0]
	mount := path.Clean(w.MountPath)
	sum := corev1.EnvVar{Name: s3layout.EnvWorkdirSHA256, Value: w.SHA256}

	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name:         WorkdirVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	init := corev1.Container{
		Name:         WorkdirContainer,
		Image:        w.StagerImage,
		Command:      []string{s3layout.StagerImageBinary, "stage", "workdir", "--to", mount},
		Env:          []corev1.EnvVar{sum},
		VolumeMounts: []corev1.VolumeMount{{Name: WorkdirVolume, MountPath: mount}},
		Resources:    initResources(main),
	}
	if w.InS3() {
		// Job name and UID (downward API) name the object; the credentials come as the
		// stager's do, through secretKeyRef.
		init.Command = append(init.Command, "--from-s3")
		init.Env = append(init.Env, jobEnv(s)...)
		for _, e := range stagingEnvVars(s) {
			if slices.Contains(s3layout.CredentialKeys, e.Name) {
				init.Env = append(init.Env, e)
			}
		}
	} else {
		init.Command = append(init.Command, "--archive", path.Join(WorkdirArchiveDir, s3layout.WorkdirArchive))
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name: WorkdirArchiveVolume,
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: WorkdirConfigMapName(s.Name)},
			}},
		})
		init.VolumeMounts = append(init.VolumeMounts, corev1.VolumeMount{Name: WorkdirArchiveVolume, MountPath: WorkdirArchiveDir, ReadOnly: true})
		objs.Children = append(objs.Children, workdirConfigMap(s))
	}
	pod.InitContainers = append(pod.InitContainers, init)
	main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: WorkdirVolume, MountPath: mount})
	main.WorkingDir = mount
	main.Env = append(main.Env, sum)
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[s3layout.AnnotationWorkdirSHA256] = w.SHA256
}

// workdirConfigMap carries the archive, immutable: a snapshot never changes, and the kubelet
// need not watch it.
func workdirConfigMap(s Spec) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        WorkdirConfigMapName(s.Name),
			Namespace:   s.Namespace,
			Labels:      objectLabels(s),
			Annotations: map[string]string{s3layout.AnnotationWorkdirSHA256: s.Workdir.SHA256},
		},
		Immutable:  ptr.To(true),
		BinaryData: map[string][]byte{s3layout.WorkdirArchive: s.Workdir.Archive},
	}
}
