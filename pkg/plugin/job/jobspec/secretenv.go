package jobspec

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/credentials"
)

// EnvSecretName is the Secret that carries a job's --secret-env values, created with the Job
// and owned by it.
func EnvSecretName(job string) string { return job + "-env" }

// validateSecretEnv checks --secret-env names like --env names, keeps them apart from --env
// and staging's variables, and refuses a credential passed as a plain --env value unless
// --env-allow says the name only looks like one. No message quotes a value.
func (s *Spec) validateSecretEnv() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	plain := map[string]bool{}
	for _, kv := range s.Env {
		plain[kv.Key] = true
	}
	seen := map[string]bool{}
	for _, kv := range s.SecretEnv {
		errs = append(errs, s.validateEnvName("secret-env", kv.Key)...)
		switch {
		case seen[kv.Key]:
			add("--secret-env: %s is given more than once", kv.Key)
		case plain[kv.Key]:
			add("%s is given both as --env and as --secret-env: keep only --secret-env %s", kv.Key, kv.Key)
		case s.Staging != nil && slices.Contains(stagingEnv, kv.Key):
			add("invalid --secret-env %q: S3 staging sets it (credentials come from the shell or --s3-secret)", kv.Key)
		case kv.Value == "":
			add("--secret-env %s: the value is empty", kv.Key)
		}
		seen[kv.Key] = true
	}
	for _, name := range s.EnvAllow {
		if credentials.IsKnown(name) {
			add("--env-allow %s: %s is a credential, never a plain value: use --secret-env %s", name, name, name)
		}
	}
	for _, kv := range s.Env {
		if credentials.LooksSecret(kv.Key) && !slices.Contains(s.EnvAllow, kv.Key) {
			add("--env %s: that looks like a credential, and an --env value is on the command line, in printed manifests "+
				"and in the Job for anyone who may read it: export it and pass --secret-env %s instead "+
				"(or --env-from-secret SECRET for a Secret that already exists); if it is not a secret, add --env-allow %s",
				kv.Key, kv.Key, kv.Key)
		}
	}
	return errs
}

// secretEnvVars reference the job's env Secret, one variable per --secret-env, never a value.
func secretEnvVars(s Spec) []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range s.SecretEnv {
		env = append(env, corev1.EnvVar{Name: kv.Key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: EnvSecretName(s.Name)}, Key: kv.Key,
		}}})
	}
	return env
}

// envSecret holds the --secret-env values, keyed by the container's variable names.
func envSecret(s Spec) *corev1.Secret {
	data := make(map[string][]byte, len(s.SecretEnv))
	for _, kv := range s.SecretEnv {
		data[kv.Key] = []byte(kv.Value)
	}
	return ownedSecret(s, EnvSecretName(s.Name), data)
}

// ownedSecret is a Secret of credentials from the submitting shell, created with the Job (which
// submit makes its owner): immutable, so nothing edits it in place and the kubelet need not
// watch it.
func ownedSecret(s Spec, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: s.Namespace,
			Labels:    objectLabels(s),
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptr.To(true),
		Data:      data,
	}
}
