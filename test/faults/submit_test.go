//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubectl-tao/kubectl-tao/test/faultproxy"
)

// The secret submit copies into NAME-env (--secret-env HF_TOKEN): it must appear in no output.
const secretValue = "hf-faults-s3cr3t"

// A submit's steps and the request each one sends, in order (see job/jobcreate): the Job,
// suspended and marked; its children (--secret-env's Secret NAME-env, --file's ConfigMap
// NAME-files, the rendezvous Service of a multi-node job); the patch that starts it.
type step struct {
	name   string
	method string
	path   func(ns, job string) string
	// says is what submit's error names when this step fails.
	says func(job string) string
}

var steps = []step{
	{"job create", "POST", func(ns, _ string) string { return "/apis/batch/v1/namespaces/" + ns + "/jobs" },
		func(job string) string { return "creating job.batch/" + job }},
	{"secret create", "POST", func(ns, _ string) string { return "/api/v1/namespaces/" + ns + "/secrets" },
		func(job string) string { return "creating secret/" + job + "-env" }},
	{"configmap create", "POST", func(ns, _ string) string { return "/api/v1/namespaces/" + ns + "/configmaps" },
		func(job string) string { return "creating configmap/" + job + "-files" }},
	{"service create", "POST", func(ns, _ string) string { return "/api/v1/namespaces/" + ns + "/services" },
		func(job string) string { return "creating service/" + job }},
	{"resume patch", "PATCH", func(ns, job string) string { return "/apis/batch/v1/namespaces/" + ns + "/jobs/" + job },
		func(job string) string { return "starting job.batch/" + job }},
}

// rule faults exactly the one request of s for job.
func (s step) rule(ns, job string, f faultproxy.Fault) faultproxy.Rule {
	return faultproxy.Rule{Method: s.method, Path: regexp.MustCompile("^" + regexp.QuoteMeta(s.path(ns, job)) + "$"), Times: 1, Fault: f}
}

// startSubmit starts a 2-rank submit of job through kc that makes every kind of child.
func startSubmit(t *testing.T, kc, ns, job string) *run {
	t.Helper()
	file := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(file, []byte("epochs: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := submit(ns, job, 2, 1, 100*time.Millisecond, time.Second, "--secret-env", "HF_TOKEN", "--file", file+":/specs/spec.yaml")
	return startEnv(t, kc, []string{"HF_TOKEN=" + secretValue}, args...)
}

// leftovers names the objects kubectl-tao made in ns that still exist (terminating ones too),
// and every pod.
func leftovers(ctx context.Context, ns string) ([]string, error) {
	ours := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kubectl-tao"}
	kinds := []struct {
		kind string
		list func() (runtime.Object, error)
	}{
		{"job", func() (runtime.Object, error) { return client.BatchV1().Jobs(ns).List(ctx, ours) }},
		{"service", func() (runtime.Object, error) { return client.CoreV1().Services(ns).List(ctx, ours) }},
		{"secret", func() (runtime.Object, error) { return client.CoreV1().Secrets(ns).List(ctx, ours) }},
		{"configmap", func() (runtime.Object, error) { return client.CoreV1().ConfigMaps(ns).List(ctx, ours) }},
		{"pod", func() (runtime.Object, error) { return client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}) }},
	}
	var out []string
	for _, k := range kinds {
		list, err := k.list()
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			o, err := meta.Accessor(item)
			if err != nil {
				return nil, err
			}
			out = append(out, k.kind+"/"+o.GetName())
		}
	}
	sort.Strings(out)
	return out, nil
}

// nothingLeft waits until no object of the submit is left: a rolled-back Job is deleted in the
// foreground, so it may stay a moment, terminating, after submit has returned.
func nothingLeft(t *testing.T, ns string) {
	t.Helper()
	var left []string
	poll(t, 60*time.Second, "nothing left in "+ns, func(ctx context.Context) (bool, error) {
		var err error
		left, err = leftovers(ctx, ns)
		return err == nil && len(left) == 0, nil
	})
}

// failedClearly checks a submit that failed at s: a non-zero exit (not a signal), nothing on
// stdout, the failing step named on stderr, and no secret anywhere.
func failedClearly(t *testing.T, r *run, s step, job string) {
	t.Helper()
	if r.code <= 0 {
		t.Errorf("%s: exit %d, want a non-zero exit", s.name, r.code)
	}
	if r.out.String() != "" {
		t.Errorf("%s: stdout %q, want nothing (no object is left to name)", s.name, r.out.String())
	}
	if !strings.Contains(r.errOut.String(), s.says(job)) {
		t.Errorf("%s: stderr %q does not say %q", s.name, r.errOut.String(), s.says(job))
	}
	if s.name != "job create" && !strings.Contains(r.errOut.String(), "nothing was left behind") && !strings.Contains(r.errOut.String(), "delete it by hand") {
		t.Errorf("%s: stderr %q does not say whether anything was left", s.name, r.errOut.String())
	}
	if strings.Contains(r.errOut.String()+r.out.String(), secretValue) {
		t.Errorf("%s: the --secret-env value is in the output", s.name)
	}
}

// statusOf is `status -o json` of job.
func statusOf(t *testing.T, ns, job string) map[string]any {
	t.Helper()
	r := tao(t, kubeconfig, "status", job, "-n", ns, "-o", "json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.out.String()), &m); err != nil || r.code != 0 {
		t.Fatalf("status: %s (%v)", r, err)
	}
	return m
}

// killedAt holds submit at step s (the request waits, then fails without ever reaching the API
// server), kills it with SIGKILL there, and checks what it leaves: a Job a submit still running
// would leave as well, so plain Pending until the grace has passed; then IncompleteSubmit in
// status and list, diagnose naming the fix, and delete removing it and every child it has.
func killedAt(t *testing.T, s step) {
	ns := namespace(t)
	proxy, proxied := startProxy(t, ns)
	const job = "killed"
	proxy.Add(s.rule(ns, job, faultproxy.Fault{Delay: 5 * time.Minute, Status: 500}))
	r := startSubmit(t, proxied, ns, job)
	poll(t, 60*time.Second, "submit held at the "+s.name, func(context.Context) (bool, error) {
		for _, req := range proxy.Requests() {
			if req.Method == s.method && req.Path == s.path(ns, job) {
				return true, nil
			}
		}
		return false, nil
	})
	if err := r.cmd.Process.Kill(); err != nil { // SIGKILL: no rollback can run
		t.Fatal(err)
	}
	<-r.done
	if r.out.String() != "" {
		t.Errorf("killed submit printed %q", r.out.String())
	}
	if s.name == "job create" {
		// Killed before the Job existed: nothing at all.
		nothingLeft(t, ns)
		return
	}
	m := statusOf(t, ns, job)
	if m["status"] != "Pending" || m["reason"] != "" || !strings.Contains(fmt.Sprint(m["message"]), "being submitted") {
		t.Errorf("right after the kill: status %v, reason %q, message %q; want Pending, no reason yet, being submitted", m["status"], m["reason"], m["message"])
	}
	// The grace is measured from the Job's creationTimestamp: what it takes is the point.
	poll(t, 90*time.Second, "IncompleteSubmit", func(context.Context) (bool, error) {
		m = statusOf(t, ns, job)
		return m["reason"] == "IncompleteSubmit", nil
	})
	fix := "kubectl tao delete " + job + " -n " + ns
	if m["status"] != "Pending" || !strings.Contains(fmt.Sprint(m["message"]), fix) {
		t.Errorf("status %v, message %q; want Pending and %q", m["status"], m["message"], fix)
	}
	if l := tao(t, kubeconfig, "list", "-n", ns); !regexp.MustCompile(`(?m)^` + job + `\s+IncompleteSubmit\s`).MatchString(l.out.String()) {
		t.Errorf("list:\n%s", l.out.String())
	}
	d := tao(t, kubeconfig, "diagnose", job, "-n", ns)
	if d.code != 0 || !strings.Contains(d.out.String(), "IncompleteSubmit") || !strings.Contains(d.out.String(), fix) {
		t.Errorf("diagnose: %s\nstdout:\n%s", d, d.out.String())
	}
	if del := tao(t, kubeconfig, "delete", job, "-n", ns); del.code != 0 || del.out.String() != "job.batch/"+job+" deleted\n" {
		t.Errorf("delete: %s\nstdout: %q", del, del.out.String())
	}
	nothingLeft(t, ns)
}

// TestSubmitKilledAtResume is the CI case: submit killed with SIGKILL while its resume patch is
// held (the patch then fails: it never reaches the API server), and a submit whose resume
// patch fails rolls back in full.
func TestSubmitKilledAtResume(t *testing.T) {
	resume := steps[len(steps)-1]
	t.Run("500", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t)
		proxy, proxied := startProxy(t, ns)
		proxy.Add(resume.rule(ns, "broken", faultproxy.Fault{Status: 500}))
		r := startSubmit(t, proxied, ns, "broken")
		r.finish(t, 2*time.Minute)
		failedClearly(t, r, resume, "broken")
		nothingLeft(t, ns)
	})
	t.Run("SIGKILL", func(t *testing.T) {
		t.Parallel()
		killedAt(t, resume)
	})
}

// TestHeavySubmitFaults (make e2e-faults) is the full table: each step of submit failing with a
// 500 and with a connection reset leaves nothing; a failed rollback leaves the Job shown as
// IncompleteSubmit; SIGKILL while each step is held leaves nothing or an IncompleteSubmit that
// delete removes. The cases run in parallel, each in a namespace of its own, so the submit grace
// is waited out once.
func TestHeavySubmitFaults(t *testing.T) {
	for _, s := range steps {
		for _, f := range []struct {
			name  string
			fault faultproxy.Fault
		}{{"500", faultproxy.Fault{Status: 500}}, {"reset", faultproxy.Fault{Reset: true}}} {
			t.Run(s.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				ns := namespace(t)
				proxy, proxied := startProxy(t, ns)
				proxy.Add(s.rule(ns, "broken", f.fault))
				r := startSubmit(t, proxied, ns, "broken")
				r.finish(t, 2*time.Minute)
				failedClearly(t, r, s, "broken")
				if proxy.Left() != 0 {
					t.Errorf("the fault was never served: the step sent no %s %s", s.method, s.path(ns, "broken"))
				}
				nothingLeft(t, ns)
			})
		}
		t.Run(s.name+"/SIGKILL", func(t *testing.T) {
			t.Parallel()
			killedAt(t, s)
		})
	}
	// The resume patch fails and so does the rollback's delete of the Job: the children are
	// gone, the Job stays, and submit says how to remove it; status then calls it
	// IncompleteSubmit and delete removes it.
	t.Run("rollback fails", func(t *testing.T) {
		t.Parallel()
		ns := namespace(t)
		proxy, proxied := startProxy(t, ns)
		const job = "stuck"
		resume := steps[len(steps)-1]
		proxy.Add(resume.rule(ns, job, faultproxy.Fault{Status: 500}))
		proxy.Add(faultproxy.Rule{Method: "DELETE", Path: regexp.MustCompile("^" + regexp.QuoteMeta(resume.path(ns, job)) + "$"), Times: 1,
			Fault: faultproxy.Fault{Status: 500}})
		r := startSubmit(t, proxied, ns, job)
		r.finish(t, 2*time.Minute)
		failedClearly(t, r, resume, job)
		if !strings.Contains(r.errOut.String(), "delete it by hand") {
			t.Errorf("stderr %q does not say how to remove what is left", r.errOut.String())
		}
		poll(t, 90*time.Second, "IncompleteSubmit", func(context.Context) (bool, error) {
			return statusOf(t, ns, job)["reason"] == "IncompleteSubmit", nil
		})
		left, err := leftovers(context.Background(), ns)
		if err != nil || strings.Join(left, ",") != "job/"+job {
			t.Errorf("left %v (%v), want only the Job", left, err)
		}
		if del := tao(t, kubeconfig, "delete", job, "-n", ns); del.code != 0 {
			t.Errorf("delete: %s", del)
		}
		nothingLeft(t, ns)
	})
}
