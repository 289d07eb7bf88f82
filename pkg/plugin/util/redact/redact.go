// Package redact keeps secret values out of what kubectl-tao prints: Secrets shown in dry runs
// and -o output, and error messages that might quote a value. Pure; shared by every command that
// handles a credential (create-pull-secret, submit's S3 staging).
package redact

import (
	"errors"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Value stands in for a secret value wherever a Secret or a message is shown.
const Value = "REDACTED"

// Secret returns a copy of s fit to print: every key of data and stringData kept, each value
// replaced by Value and shown as stringData, so a reader sees the Secret's shape and no value.
func Secret(s *corev1.Secret) *corev1.Secret {
	out := s.DeepCopy()
	keys := map[string]bool{}
	for k := range s.Data {
		keys[k] = true
	}
	for k := range s.StringData {
		keys[k] = true
	}
	out.Data, out.StringData = nil, nil
	if len(keys) > 0 {
		out.StringData = make(map[string]string, len(keys))
		for k := range keys {
			out.StringData[k] = Value
		}
	}
	return out
}

// scrubbed hides secret values in an error's text but keeps the error chain, so that exit
// codes still classify it.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// Error returns err with every occurrence of each non-empty secret replaced by Value; err
// itself when none occurs. Longer secrets are replaced first, so one that contains another is
// never half-replaced.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	vals := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			vals = append(vals, s)
		}
	}
	if len(vals) == 0 {
		return err
	}
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, s := range vals {
		msg = strings.ReplaceAll(msg, s, Value)
	}
	inner := errors.Unwrap(err)
	if inner == nil {
		inner = err
	}
	return &scrubbed{msg: msg, err: inner}
}

// URL returns raw fit to quote in a message: the password of a user:password@ part replaced by
// Value, as url.URL.Redacted does, but found in the text itself, so that a URL that does not
// parse as its writer meant is masked too ("#s3://key:secret@host" parses as a bare fragment,
// which Redacted leaves whole). Everything after the first ':' of what stands between "://"
// (or the start) and the last '@' is taken for a password.
func URL(raw string) string {
	head, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		head, rest = raw[:i+3], raw[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	user, _, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return raw
	}
	return head + user + ":" + Value + rest[at:]
}
