package jobspec

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// EnvStager says where the init container put the binary the supervisor runs from; its
// presence marks a supervised container (see Supervised).
const EnvStager = "TAO_STAGER"

// Supervised reports whether a pod (or a Job's pod template) runs its training container under
// the supervisor: its exit codes 201 to 204 are then the supervisor's, and it can dump stacks.
func Supervised(pod *corev1.PodSpec) bool {
	for _, c := range pod.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == EnvStager {
				return true
			}
		}
	}
	return false
}

// Staging is S3 data staging (--input, --output-path): an init container copies the stager binary
// into a shared emptyDir, and the wrapper runs `stage in` before the command and `stage out`
// after it. Credentials reach the pod only through secretKeyRef.
type Staging struct {
	Inputs  []s3layout.Input
	Outputs []string
	// StagerImage holds the static kubectl-tao binary at s3layout.StagerImageBinary.
	StagerImage string
	// NoLogArchive (--no-log-archive) runs the command without `stage run`: no rank's log is
	// kept in S3.
	NoLogArchive bool
	// ExistingSecret names a Secret the user made (--s3-secret); it is referenced, not created.
	ExistingSecret string
	// Checkpoints, when set, are kept in S3 and restored on every attempt (--checkpoint-dir).
	Checkpoints *Checkpoints
	// NoS3 is staging for the supervisor alone: checkpoints on a --volume or --hang-timeout,
	// and nothing to move through S3. No credentials, no Secret.
	NoS3 bool
	// Credentials, when ExistingSecret is empty, become the Secret s3layout.SecretName(job),
	// created with the Job and owned by it: keys from s3layout.CredentialKeys, empty ones left out.
	Credentials map[string]string
}

// SecretName is the Secret the pod's credentials come from.
func (st *Staging) SecretName(job string) string {
	if st.ExistingSecret != "" {
		return st.ExistingSecret
	}
	return s3layout.SecretName(job)
}

// requiredCredentials are the keys without which staging cannot work (the endpoint is optional:
// AWS needs none).
var requiredCredentials = []string{s3layout.EnvAccessKey, s3layout.EnvSecretKey, s3layout.EnvBucket}

// MissingCredentials lists the required keys that are absent or empty in creds.
func MissingCredentials(creds map[string]string) []string {
	var missing []string
	for _, k := range requiredCredentials {
		if creds[k] == "" {
			missing = append(missing, k)
		}
	}
	return missing
}

// ValidateEndpoint checks an S3_ENDPOINT_URL without ever quoting it (it could carry a password).
func ValidateEndpoint(v string) error {
	u, err := url.Parse(v)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%s must be an http:// or https:// URL with a host, e.g. https://s3.example.com", s3layout.EnvEndpoint)
	case u.User != nil:
		return fmt.Errorf("%s must not carry a user or password: the keys go in %s and %s", s3layout.EnvEndpoint, s3layout.EnvAccessKey, s3layout.EnvSecretKey)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		// The stager (s3.ParseEndpoint) refuses these: the job would fail in its first second.
		return fmt.Errorf("%s must be only scheme://host[:port], without a path, query or fragment", s3layout.EnvEndpoint)
	case strings.Contains(u.Host, "%"):
		// The stager refuses these too: the host is handed on unescaped and parsed again.
		return fmt.Errorf("%s: the host may not hold a %%-escape or an IPv6 zone", s3layout.EnvEndpoint)
	}
	return nil
}

// stagingEnv are the variables the wrapper and the stager use; --env may not set them.
var stagingEnv = []string{
	EnvStager, s3layout.EnvInputs, s3layout.EnvOutputs, EnvHangTimeout, EnvSupervisorAddr, EnvNodeName,
	s3layout.EnvAccessKey, s3layout.EnvSecretKey, s3layout.EnvBucket, s3layout.EnvEndpoint,
}

// supervisorOnly reports whether the job needs the supervisor for something other than S3: the
// hang watchdog, an elastic job's rendezvous host, an MPI job's agent.
func (s *Spec) supervisorOnly() bool { return s.HangTimeout > 0 || s.Elastic() || s.MPI() }

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func (s *Spec) validateStaging() []error {
	st := s.Staging
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	for _, kv := range s.Annotations {
		if kv.Key == s3layout.AnnotationOutputs || kv.Key == s3layout.AnnotationS3Secret || kv.Key == s3layout.AnnotationCheckpoints {
			add("invalid --annotation %q: the key is reserved for kubectl-tao", kv.Key)
		}
	}
	for _, v := range s.Volumes {
		if under(path.Clean(v.MountPath), s3layout.StagerDir) || under(s3layout.StagerDir, path.Clean(v.MountPath)) {
			add("--volume %s: the path %s is reserved for the stager binary", v.MountPath, s3layout.StagerDir)
		}
	}
	for _, f := range s.Files {
		if under(path.Clean(f.ContainerPath), s3layout.StagerDir) {
			add("--file %s: the path %s is reserved for the stager binary", f.ContainerPath, s3layout.StagerDir)
		}
	}
	if st == nil {
		return errs
	}
	for _, kv := range s.Env {
		if slices.Contains(stagingEnv, kv.Key) {
			add("invalid --env %q: S3 staging sets it (credentials come from the shell or --s3-secret)", kv.Key)
		}
	}
	for _, kv := range s.Env {
		if slices.Contains(checkpointEnv, kv.Key) {
			add("invalid --env %q: --checkpoint-dir sets it", kv.Key)
		}
	}
	if len(st.Inputs) == 0 && len(st.Outputs) == 0 && st.Checkpoints == nil && (s.Workdir == nil || !s.Workdir.InS3()) && !s.supervisorOnly() {
		add("S3 staging needs at least one --input, --output-path or --checkpoint-dir")
	}
	if st.Checkpoints != nil {
		errs = append(errs, s.validateCheckpoints()...)
	}
	switch {
	case strings.TrimSpace(st.StagerImage) == "":
		add("--stager-image is empty")
	case strings.ContainsAny(st.StagerImage, " \t\r\n"):
		add("invalid --stager-image %q: an image reference has no whitespace", st.StagerImage)
	}

	seen := map[string]bool{}
	for _, in := range st.Inputs {
		if err := s3layout.ValidateContainerPath(in.Path); err != nil {
			add("--input %s: %w", in, err)
			continue
		}
		if seen[in.Path] {
			add("--input %s: the path is given more than once", in.Path)
			continue
		}
		for p := range seen {
			if under(in.Path, p) || under(p, in.Path) {
				add("--input %s and --input %s are nested: one would download into the other", p, in.Path)
			}
		}
		seen[in.Path] = true
		if under(in.Path, s3layout.StagerDir) {
			add("--input %s: the path %s is reserved for the stager binary", in.Path, s3layout.StagerDir)
		}
		for _, f := range s.Files {
			c := path.Clean(f.ContainerPath)
			if under(in.Path, c) || under(c, in.Path) {
				add("--input %s: the path overlaps --file %s, which is mounted read-only", in.Path, c)
			}
		}
		for _, v := range s.Volumes {
			if v.ReadOnly && under(in.Path, path.Clean(v.MountPath)) {
				add("--input %s: the path is on the read-only --volume %s:%s", in.Path, v.Claim, path.Clean(v.MountPath))
			}
		}
	}
	outs := map[string]bool{}
	for _, o := range st.Outputs {
		if err := s3layout.ValidateOutputPath(o); err != nil {
			add("--output-path: %w", err)
			continue
		}
		if outs[o] {
			add("--output-path %s: the path is given more than once", o)
			continue
		}
		for p := range outs {
			if under(o, p) || under(p, o) {
				add("--output-path %s and --output-path %s are nested: the inner one would be uploaded twice", p, o)
			}
		}
		outs[o] = true
		if under(o, s3layout.StagerDir) {
			add("--output-path %s: the path %s is reserved for the stager binary", o, s3layout.StagerDir)
		}
	}

	switch {
	case st.NoS3 && (len(st.Inputs) > 0 || len(st.Outputs) > 0 || (st.Checkpoints == nil && !s.supervisorOnly()) ||
		(st.Checkpoints != nil && !OnVolume(st.Checkpoints.Dir, s.Volumes))):
		add("internal error: staging without S3 has something to move through S3")
	case st.NoS3 && (st.ExistingSecret != "" || st.Credentials != nil):
		add("internal error: staging without S3 has S3 credentials")
	case st.NoS3:
	case st.ExistingSecret != "" && st.Credentials != nil:
		add("internal error: staging has both --s3-secret and credentials from the shell")
	case st.ExistingSecret != "":
		if msgs := validation.IsDNS1123Subdomain(st.ExistingSecret); len(msgs) > 0 {
			add("invalid --s3-secret %q: %s", st.ExistingSecret, strings.Join(msgs, "; "))
		}
	default:
		errs = append(errs, ValidateCredentials(st.Credentials, "in the submitting shell",
			"export them, or name a Secret holding them with --s3-secret")...)
	}
	return errs
}

// ValidateCredentials checks credentials from the shell or a Secret (where says which) without
// ever quoting a key's value; fix says what to do about missing ones.
func ValidateCredentials(creds map[string]string, where, fix string) []error {
	var errs []error
	if missing := MissingCredentials(creds); len(missing) > 0 {
		errs = append(errs, fmt.Errorf("S3 staging needs %s %s (and %s for a non-AWS endpoint): %s",
			strings.Join(missing, ", "), where, s3layout.EnvEndpoint, fix))
	}
	if b := creds[s3layout.EnvBucket]; b != "" {
		if err := s3layout.ValidateBucket(b); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", s3layout.EnvBucket, where, err))
		}
	}
	if e := creds[s3layout.EnvEndpoint]; e != "" {
		if err := ValidateEndpoint(e); err != nil {
			errs = append(errs, fmt.Errorf("%w (%s)", err, where))
		}
	}
	for _, k := range []string{s3layout.EnvAccessKey, s3layout.EnvSecretKey} {
		if strings.ContainsAny(creds[k], "\r\n") {
			errs = append(errs, fmt.Errorf("%s %s spans several lines: give only the key", k, where))
		}
	}
	return errs
}

// jobEnv are the SDK's job identity variables, set in every Job: TAO_JOB_ID is the name,
// TAO_JOB_UID the UID, read through the downward API from the label the Job controller puts
// on its pods (the UID is only known once the Job exists).
func jobEnv(s Spec) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: s3layout.EnvJobID, Value: s.Name},
		{Name: s3layout.EnvJobUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.labels['" + batchv1.ControllerUidLabel + "']",
		}}},
	}
}

// stagingEnvVars are the wrapper's and the stager's variables: plain values for the paths,
// secretKeyRef for every credential (never a plain value).
func stagingEnvVars(s Spec) []corev1.EnvVar {
	st := s.Staging
	env := []corev1.EnvVar{{Name: EnvStager, Value: s3layout.StagerBinary}}
	if len(st.Inputs) > 0 {
		env = append(env, corev1.EnvVar{Name: s3layout.EnvInputs, Value: EscapeKubelet(s3layout.EncodeInputs(st.Inputs))})
	}
	if len(st.Outputs) > 0 {
		env = append(env, corev1.EnvVar{Name: s3layout.EnvOutputs, Value: EscapeKubelet(s3layout.EncodeOutputs(st.Outputs))})
	}
	if !st.NoLogArchive || st.Checkpoints != nil {
		// The pod's name keeps each attempt's log archive apart (s3layout.LogArchiveKey), and
		// numbers a rank's attempts (s3layout.AttemptOf).
		env = append(env, corev1.EnvVar{Name: s3layout.EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.name",
		}}})
	}
	if st.Checkpoints != nil {
		env = append(env, checkpointEnvVars(s)...)
	} else if s.HangTimeout > 0 {
		// The budget kills a hung command's group within its share of the grace period.
		env = append(env, gracePeriodEnv(s))
	}
	if st.NoS3 {
		return env
	}
	secret := st.SecretName(s.Name)
	for _, k := range s3layout.CredentialKeys {
		ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: k}
		if k == s3layout.EnvEndpoint {
			ref.Optional = ptr.To(true)
		}
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}})
	}
	return env
}

// addStaging adds the stager init container, the emptyDir it fills, the mount in the main
// container, and the Job's staging annotations.
func addStaging(s Spec, objs *Objects) {
	st := s.Staging
	job := objs.Job
	pod := &job.Spec.Template.Spec
	main := &pod.Containers[0]
	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name:         s3layout.StagerVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	init := corev1.Container{
		Name:         s3layout.StagerContainer,
		Image:        st.StagerImage,
		Command:      []string{s3layout.StagerImageBinary, "stage", "install", s3layout.StagerDir},
		VolumeMounts: []corev1.VolumeMount{{Name: s3layout.StagerVolume, MountPath: s3layout.StagerDir}},
		Resources:    initResources(main),
	}
	pod.InitContainers = append(pod.InitContainers, init)
	// Read-only: the training command cannot replace the binary that uploads its results.
	main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: s3layout.StagerVolume, MountPath: s3layout.StagerDir, ReadOnly: true})

	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	if !st.NoS3 {
		job.Annotations[s3layout.AnnotationS3Secret] = st.SecretName(s.Name)
	}
	if len(st.Outputs) > 0 {
		b, _ := json.Marshal(st.Outputs)
		job.Annotations[s3layout.AnnotationOutputs] = string(b)
	}
	if c := st.Checkpoints; c != nil {
		b, _ := json.Marshal(s3layout.CheckpointSettings{Dir: c.Dir, Patterns: c.Patterns, OnVolume: OnVolume(c.Dir, s.Volumes)})
		job.Annotations[s3layout.AnnotationCheckpoints] = string(b)
	}
	if st.ExistingSecret == "" && !st.NoS3 {
		objs.Children = append(objs.Children, credentialsSecret(s))
	}
}

// initResources are the main container's CPU and memory, for an init container: a namespace
// whose quota demands them then admits the pod, and an init container's request never adds to
// the pod's (it is the max, not the sum).
func initResources(main *corev1.Container) corev1.ResourceRequirements {
	var out corev1.ResourceRequirements
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := main.Resources.Requests[r]; ok {
			if out.Requests == nil {
				out.Requests = corev1.ResourceList{}
			}
			out.Requests[r] = q
		}
		if q, ok := main.Resources.Limits[r]; ok {
			if out.Limits == nil {
				out.Limits = corev1.ResourceList{}
			}
			out.Limits[r] = q
		}
	}
	return out
}

// credentialsSecret holds the shell's credentials, immutable: nothing edits it in place, and
// the kubelet need not watch it.
func credentialsSecret(s Spec) *corev1.Secret {
	data := map[string][]byte{}
	for _, k := range s3layout.CredentialKeys {
		if v := s.Staging.Credentials[k]; v != "" {
			data[k] = []byte(v)
		}
	}
	return ownedSecret(s, s3layout.SecretName(s.Name), data)
}
