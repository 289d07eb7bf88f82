package createpullsecret

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/redact"
)

// NGC's registry and the fixed user its API keys log in as.
const (
	Registry = "nvcr.io"
	Username = "$oauthtoken"
)

// Redacted stands in for the key wherever a Secret or a message is shown.
const Redacted = redact.Value

type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// Build makes the kubernetes.io/dockerconfigjson Secret that lets the kubelet pull from nvcr.io.
func Build(ns, name, key string) *corev1.Secret {
	cfg := dockerConfig{Auths: map[string]dockerAuth{Registry: {
		Username: Username, Password: key,
		Auth: base64.StdEncoding.EncodeToString([]byte(Username + ":" + key)),
	}}}
	data, _ := json.Marshal(cfg)
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-tao"}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}
}

// Redact returns a copy fit to print: the data replaced by the same document with the password
// and auth fields REDACTED, shown as stringData so a reader sees the shape. (redact.Secret hides
// whole values; a pull secret keeps its document's shape, which is what users check.)
func Redact(s *corev1.Secret) *corev1.Secret {
	out := s.DeepCopy()
	out.Data = nil
	cfg := dockerConfig{Auths: map[string]dockerAuth{Registry: {Username: Username, Password: Redacted, Auth: Redacted}}}
	data, _ := json.Marshal(cfg)
	out.StringData = map[string]string{corev1.DockerConfigJsonKey: string(data)}
	return out
}

// CleanKey trims the line ending a pipe or `echo` adds; a key has no whitespace of its own.
func CleanKey(raw string) string {
	return strings.TrimSpace(raw)
}
