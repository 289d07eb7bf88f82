package s3

import (
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
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
			if quotesPassword(s, func(s string) error { _, _, err := ParseEndpoint(s); return err }) {
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
		if verr != nil && quotesPassword(s, jobspec.ValidateEndpoint) {
			t.Fatalf("ValidateEndpoint(%q): the error quotes the password: %v", s, verr)
		}
	})
}

// quotesPassword reports whether check's error for s would quote the password s carries in a
// user:password@ part. The password is swapped for a marker that no message holds by itself
// (a real password may be a piece of the message's own text, e.g. "ple." of its example URL),
// and the error for that URL is searched for the marker.
func quotesPassword(s string, check func(string) error) bool {
	const marker = "Pw7q3zK9"
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return false
	}
	userinfo := rest[:at]
	if strings.ContainsAny(userinfo, "/?#") {
		return false
	}
	user, pw, ok := strings.Cut(userinfo, ":")
	if !ok || pw == "" {
		return false
	}
	err := check(scheme + user + ":" + marker + rest[at:])
	return err != nil && strings.Contains(err.Error(), marker)
}
