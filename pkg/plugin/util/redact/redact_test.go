package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func TestSecretKeepsKeysHidesValues(t *testing.T) {
	s := &corev1.Secret{
		Data:       map[string][]byte{"ACCESS_KEY": []byte("AKIATOPSECRET"), "SECRET_KEY": []byte("s3cr3t/+=")},
		StringData: map[string]string{"S3_BUCKET_NAME": "bucket-x"},
	}
	out := Secret(s)
	b, _ := yaml.Marshal(out)
	for _, v := range []string{"AKIATOPSECRET", "s3cr3t", "bucket-x", "QUtJQVRPUFNFQ1JFVA"} {
		if strings.Contains(string(b), v) {
			t.Errorf("redacted Secret shows %q:\n%s", v, b)
		}
	}
	if len(out.StringData) != 3 || out.StringData["ACCESS_KEY"] != Value || out.Data != nil {
		t.Errorf("redacted = %+v", out)
	}
	if string(s.Data["ACCESS_KEY"]) != "AKIATOPSECRET" {
		t.Error("Secret modified its argument")
	}
}

func TestErrorScrubsAndKeepsTheChain(t *testing.T) {
	api := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("value abcd and abcdef"))
	err := Error(fmt.Errorf("creating: %w", api), "abcd", "abcdef", "")
	if strings.Contains(err.Error(), "abcd") || !strings.Contains(err.Error(), "value REDACTED and REDACTED") {
		t.Errorf("scrubbed = %q", err)
	}
	if !apierrors.IsForbidden(err) {
		t.Error("scrubbing lost the API status")
	}
	plain := errors.New("nothing secret")
	if Error(plain, "zzz") != plain || Error(nil, "x") != nil {
		t.Error("Error changed an error without secrets")
	}
	if got := Error(errors.New("leaf abcd"), "abcd"); got.Error() != "leaf REDACTED" || errors.Unwrap(got) == nil {
		t.Errorf("leaf error = %q", got)
	}
}

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://s3.example.com", "https://s3.example.com"},
		{"https://user@s3.example.com", "https://user@s3.example.com"},
		{"https://user:hunter2@s3.example.com:9000/", "https://user:REDACTED@s3.example.com:9000/"},
		{"https://user:pa:ss@word@host", "https://user:REDACTED@host"},
		// Not a URL's userinfo to net/url, a password all the same (CI's fuzz-short found these).
		{"#000://000:0@0", "#000://000:REDACTED@0"},
		{"s3?://AKIA:secret@host", "s3?://AKIA:REDACTED@host"},
		{"key:secret@host", "key:REDACTED@host"},
		{"ftp://h", "ftp://h"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
