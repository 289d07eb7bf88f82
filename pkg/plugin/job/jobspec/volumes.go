package jobspec

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseVolume reads CLAIM:MOUNT_PATH[:ro].
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	v := Volume{}
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && parts[2] == "ro":
		v.ReadOnly = true
	case len(parts) == 3 && parts[2] == "rw":
	default:
		return v, fmt.Errorf("--volume %q: expected CLAIM:MOUNT_PATH or CLAIM:MOUNT_PATH:ro", s)
	}
	v.Claim, v.MountPath = parts[0], parts[1]
	return v, nil
}

// ParseFileFlag splits LOCAL_PATH:CONTAINER_PATH at the last colon, so a Windows drive letter
// in LOCAL_PATH survives.
func ParseFileFlag(s string) (local, container string, err error) {
	i := strings.LastIndex(s, ":")
	if i <= 0 || i == len(s)-1 {
		return "", "", fmt.Errorf("--file %q: expected LOCAL_PATH:CONTAINER_PATH, e.g. ./train.yaml:/specs/train.yaml", s)
	}
	return s[:i], s[i+1:], nil
}

var keyUnsafe = regexp.MustCompile(`[^-._a-zA-Z0-9]+`)

// fileKey maps a container path to a ConfigMap key ([-._a-zA-Z0-9]+): its base name, with
// every other character replaced. The API server refuses keys starting with ".." (the kubelet
// keeps its own ..data links there), so such a name gets a leading "_"; and keys longer than
// 253 characters, while a file name may have 255 bytes: a longer one is cut (the key only
// names the file inside the ConfigMap; the pod sees the container path). Two files that end up
// with one key are refused by validateMounts.
func fileKey(containerPath string) string {
	k := keyUnsafe.ReplaceAllString(path.Base(containerPath), "_")
	switch {
	case k == "." || k == ".." || k == "":
		k = "file"
	case strings.HasPrefix(k, ".."):
		k = "_" + k
	}
	if len(k) > validation.DNS1123SubdomainMaxLength {
		k = k[:validation.DNS1123SubdomainMaxLength]
	}
	return k
}

// validateMountPath checks a container path for a volume or file mount.
func validateMountPath(flag, p string) error {
	switch {
	case !utf8.ValidString(p):
		// The API server's JSON would replace those bytes: the pod would mount elsewhere.
		return fmt.Errorf("invalid --%s path %q: not valid UTF-8", flag, p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("invalid --%s path %q: must be absolute", flag, p)
	case strings.Contains("/"+p+"/", "/../"):
		return fmt.Errorf("invalid --%s path %q: must not contain \"..\"", flag, p)
	case path.Clean(p) == "/":
		return fmt.Errorf("invalid --%s path %q: cannot mount over /", flag, p)
	case path.Clean(p) == "/dev/shm":
		return fmt.Errorf("invalid --%s path %q: /dev/shm is set with --shm-size", flag, p)
	}
	return nil
}

func (s *Spec) validateMounts() []error {
	var errs []error
	paths := map[string]string{}
	claim := func(flag, p string) {
		c := path.Clean(p)
		if prev, ok := paths[c]; ok {
			errs = append(errs, fmt.Errorf("--%s %s: the path is already mounted by --%s", flag, c, prev))
		}
		paths[c] = flag
	}
	for _, v := range s.Volumes {
		if msgs := validation.IsDNS1123Subdomain(v.Claim); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --volume claim %q: %s", v.Claim, strings.Join(msgs, "; ")))
		}
		if err := validateMountPath("volume", v.MountPath); err != nil {
			errs = append(errs, err)
			continue
		}
		claim("volume", v.MountPath)
	}
	keys := map[string]string{}
	total := 0
	for _, f := range s.Files {
		if err := validateMountPath("file", f.ContainerPath); err != nil {
			errs = append(errs, err)
			continue
		}
		claim("file", f.ContainerPath)
		k := fileKey(f.ContainerPath)
		if prev, ok := keys[k]; ok {
			errs = append(errs, fmt.Errorf("--file %s and %s would share the ConfigMap key %q: give them different file names",
				prev, f.ContainerPath, k))
		}
		keys[k] = f.ContainerPath
		total += len(f.Data) + len(k)
	}
	if total > MaxFilesBytes {
		errs = append(errs, fmt.Errorf("--file: %d bytes in total, more than the %d a ConfigMap can hold: put large files in a volume (--volume) or in S3",
			total, MaxFilesBytes))
	}
	return errs
}

// filesConfigMap holds every --file, keyed by fileKey; text as data, anything else as binaryData.
func filesConfigMap(s Spec) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      FilesConfigMapName(s.Name),
			Namespace: s.Namespace,
			Labels:    objectLabels(s),
		},
	}
	for _, f := range s.Files {
		k := fileKey(f.ContainerPath)
		if utf8.Valid(f.Data) {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[k] = string(f.Data)
			continue
		}
		if cm.BinaryData == nil {
			cm.BinaryData = map[string][]byte{}
		}
		cm.BinaryData[k] = f.Data
	}
	return cm
}

// FilesConfigMapName names the ConfigMap that carries a job's --file contents.
func FilesConfigMapName(job string) string { return job + "-files" }

// addMounts adds the PVC volumes and the files ConfigMap to the pod.
func addMounts(s Spec, pod *corev1.PodSpec) {
	c := &pod.Containers[0]
	for i, v := range s.Volumes {
		name := "vol-" + strconv.Itoa(i)
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name: name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: v.Claim, ReadOnly: v.ReadOnly,
			}},
		})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path.Clean(v.MountPath), ReadOnly: v.ReadOnly})
		if path.Clean(v.MountPath) == ResultsPath && !s.hasEnv(EnvResultsRoot) {
			c.Env = append(c.Env, corev1.EnvVar{Name: EnvResultsRoot, Value: ResultsPath})
		}
	}
	if len(s.Files) == 0 {
		return
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name: FilesVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: FilesConfigMapName(s.Name)},
		}},
	})
	for _, f := range s.Files {
		// subPath mounts exactly one file, so the rest of the image's directory stays visible.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
			Name: FilesVolume, MountPath: path.Clean(f.ContainerPath), SubPath: fileKey(f.ContainerPath), ReadOnly: true,
		})
	}
}

func (s *Spec) hasEnv(key string) bool {
	for _, kv := range s.Env {
		if kv.Key == key {
			return true
		}
	}
	return false
}
