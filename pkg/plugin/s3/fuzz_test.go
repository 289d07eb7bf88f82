package s3

import (
	"net/url"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

// FuzzParseEndpoint holds S3_ENDPOINT_URL parsing to three promises (make fuzz-short, make
// fuzz): an accepted endpoint names a host and reads the same written back; no error quotes a
// password the URL carried; and what submit accepts (jobspec.ValidateEndpoint) the stager in
// the pod accepts too, so a job never fails on an endpoint its submit let through.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{
		"", "https://s3.example.com", "http://127.0.0.1:9000", "s3.example.com", "minio:9000", "ftp://h",
		"https://user:hunter2@s3.example.com", "https://s3.example.com/path", "https://h/?q=1", "https://h/#f",
		"https://", "http://[::1]:9000/", "ftp://user:hunter2@h", "https://user:hunter2@h%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, secure, err := ParseEndpoint(s)
		if err != nil {
			if host != "" || secure {
				t.Fatalf("ParseEndpoint(%q) refused it (%v) but returned %q, %v", s, err, host, secure)
			}
			if pw := password(s); pw != "" && strings.Contains(err.Error(), pw) {
				t.Fatalf("ParseEndpoint(%q): the error quotes the password: %v", s, err)
			}
		} else {
			if host == "" {
				t.Fatalf("ParseEndpoint(%q) accepted it with no host", s)
			}
			scheme := "http://"
			if secure {
				scheme = "https://"
			}
			if h, sec, err := ParseEndpoint(scheme + host); err != nil || h != host || sec != secure {
				t.Fatalf("ParseEndpoint(%q) = %q, %v; written back it reads %q, %v, %v", s, host, secure, h, sec, err)
			}
		}
		verr := jobspec.ValidateEndpoint(s)
		if verr == nil && err != nil {
			t.Fatalf("submit accepts S3_ENDPOINT_URL %q, the stager refuses it: %v", s, err)
		}
		if pw := password(s); verr != nil && pw != "" && strings.Contains(verr.Error(), pw) {
			t.Fatalf("ValidateEndpoint(%q): the error quotes the password: %v", s, verr)
		}
	})
}

// password is the password s carries in a user:password@ part, if it reads as one.
func password(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		rest = s
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	userinfo := rest[:at]
	if i := strings.IndexAny(userinfo, "/?#"); i >= 0 {
		return ""
	}
	_, pw, ok := strings.Cut(userinfo, ":")
	if !ok || len(pw) < 4 {
		// Too short to tell apart from the rest of the message.
		return ""
	}
	if u, err := url.PathUnescape(pw); err == nil {
		return u
	}
	return pw
}
