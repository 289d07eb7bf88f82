// Package exitcode holds the one table of exit codes that every kubectl-tao command uses, and
// maps errors onto it. Scripts depend on these numbers: never renumber, only append.
package exitcode

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Code is a process exit status with a documented meaning.
type Code int

// The exit-code table. README.md documents the same rows; TestTableMatchesReadme keeps them equal.
const (
	OK            Code = 0  // success
	Error         Code = 1  // any other failure: an API error, I/O, an interrupted operation
	Usage         Code = 2  // bad flag, argument or value; nothing was sent to the cluster
	NotFound      Code = 3  // the named Job, namespace or other object does not exist
	AlreadyExists Code = 4  // an object of that name already exists; it was left untouched
	NoCluster     Code = 5  // no cluster configured, unreachable, or credentials rejected
	Forbidden     Code = 6  // RBAC denied a request the command needs
	NoCapacity    Code = 7  // the cluster's allocatable GPUs can never hold the request
	Timeout       Code = 8  // a wait ran out of time before the outcome was known
	JobFailed     Code = 9  // the Job ended in Error
	JobCanceled   Code = 10 // the Job was canceled (deleted) before it finished
	// PreflightFailed: at least one preflight check failed.
	PreflightFailed Code = 11
	// Stuck: ranks that cannot start (image pull, container config, unschedulable) for
	// --stuck-timeout.
	Stuck Code = 12
	// NotAdmitted: Kueue will never admit the job (Inadmissible, Deactivated).
	NotAdmitted Code = 13
)

// Table lists every code with its name and meaning, in order, for help text and docs.
var Table = []struct {
	Code    Code
	Name    string
	Meaning string
}{
	{OK, "OK", "success"},
	{Error, "Error", "any other failure: an API error, I/O, an interrupted operation"},
	{Usage, "Usage", "bad flag, argument or value; nothing was sent to the cluster"},
	{NotFound, "NotFound", "the named Job, namespace or other object does not exist"},
	{AlreadyExists, "AlreadyExists", "an object of that name already exists; it was left untouched"},
	{NoCluster, "NoCluster", "no cluster configured, API server unreachable, or credentials rejected"},
	{Forbidden, "Forbidden", "RBAC denied a request the command needs"},
	{NoCapacity, "NoCapacity", "the cluster's allocatable GPUs can never hold the request"},
	{Timeout, "Timeout", "a wait ran out of time before the outcome was known"},
	{JobFailed, "JobFailed", "the Job ended in Error"},
	{JobCanceled, "JobCanceled", "the Job was canceled (deleted) before it finished"},
	{PreflightFailed, "PreflightFailed", "at least one preflight check failed"},
	{Stuck, "Stuck", "the job cannot start: ranks stuck (image pull, container config, unschedulable) for --stuck-timeout"},
	{NotAdmitted, "NotAdmitted", "Kueue will never admit the job (Inadmissible or Deactivated); the message carries Kueue's reason"},
}

// codedError carries an explicit exit code alongside the error shown to the user.
type codedError struct {
	code Code
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// WithCode attaches code to err. A nil err stays nil.
func WithCode(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// passthrough is the exit status of a program a command ran in the foreground for the user (the
// in-pod `stage run`), passed on as the command's own.
type passthrough struct{ code int }

func (e *passthrough) Error() string { return fmt.Sprintf("the program exited with code %d", e.code) }

// Passthrough makes the process exit with code, the status of the program it ran, printing
// nothing: the program has said what went wrong. 0 is no error.
func Passthrough(code int) error {
	if code == 0 {
		return nil
	}
	return &passthrough{code: code}
}

// PassedThrough returns the code of a Passthrough error.
func PassedThrough(err error) (int, bool) {
	var p *passthrough
	if errors.As(err, &p) {
		return p.code, true
	}
	return 0, false
}

// Usagef makes a usage error: the user asked for something malformed.
func Usagef(format string, args ...any) error {
	return WithCode(Usage, fmt.Errorf(format, args...))
}

// IsUsage reports whether err is a usage error, so callers can print a pointer to --help.
func IsUsage(err error) bool { return Of(err) == Usage }

// Coded reports whether err carries an explicit code (WithCode): it was explained already.
func Coded(err error) bool {
	var ce *codedError
	return errors.As(err, &ce)
}

// Of classifies err: an explicit code wins, then API status reasons, then transport failures.
func Of(err error) Code {
	if err == nil {
		return OK
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	switch {
	case apierrors.IsNotFound(err):
		return NotFound
	case apierrors.IsAlreadyExists(err):
		return AlreadyExists
	case apierrors.IsForbidden(err):
		return Forbidden
	case apierrors.IsUnauthorized(err):
		return NoCluster
	}
	if isUnreachable(err) {
		return NoCluster
	}
	return Error
}

// isUnreachable reports transport failures: refused connections, DNS failures, TLS and
// dial timeouts. client-go wraps them in *url.Error.
func isUnreachable(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &oe) || errors.As(err, &de) || (errors.As(err, &ne) && ne.Timeout()) ||
		strings.Contains(ue.Err.Error(), "certificate") || strings.Contains(ue.Err.Error(), "EOF")
}

// Explain rewrites errors whose raw text does not tell the user what to do: rejected
// credentials and an unreachable API server. Others pass through unchanged.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return err
	}
	if apierrors.IsUnauthorized(err) {
		return WithCode(NoCluster, fmt.Errorf("Could not authenticate to a Kubernetes cluster: %w\n"+
			"Check that `kubectl get nodes` works with the same --kubeconfig/--context, or set $KUBECONFIG", err))
	}
	if isUnreachable(err) {
		var ue *url.Error
		errors.As(err, &ue)
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Scheme + "://" + u.Host
		}
		text := ue.Err.Error()
		if outer := err.Error(); outer != ue.Error() {
			// Keep what the command was doing when the connection failed (which step of a
			// submit, and whether its rollback ran): the request's URL alone does not say.
			text = strings.Replace(outer, ue.Error(), text, 1)
		}
		return WithCode(NoCluster, fmt.Errorf("Could not reach the Kubernetes API server at %s: %s\n"+
			"Check that `kubectl get nodes` works with the same --kubeconfig/--context, or set $KUBECONFIG", host, text))
	}
	return err
}
