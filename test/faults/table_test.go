//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubectl-tao/kubectl-tao/test/faultproxy"
	"github.com/kubectl-tao/kubectl-tao/test/localcluster"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// holdFinalizer keeps a canceled job's pods in the API after the Job controller has deleted
// them, so that `cancel` (which waits until they are gone) is still waiting when the fault
// comes; the test removes it once the fault is over.
const holdFinalizer = "faults.kubectl-tao.test/hold"

// fault is one way the control plane fails under the commands of TestHeavyFaultTable.
type fault struct {
	name   string
	inject func(t *testing.T, proxy *faultproxy.Proxy)
}

func component(action localcluster.ComponentAction, name string) func(*testing.T, *faultproxy.Proxy) {
	return func(t *testing.T, _ *faultproxy.Proxy) {
		t.Helper()
		controlComponent(t, action, name)
	}
}

func controlComponent(t *testing.T, action localcluster.ComponentAction, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	begin := time.Now()
	if err := localcluster.ControlComponent(ctx, localcluster.Config{StateDir: stateDir}, action, name); err != nil {
		t.Fatalf("%s %s: %v", action, name, err)
	}
	t.Logf("%s %s took %s", action, name, time.Since(begin).Round(time.Millisecond))
}

// burst answers the next n GET requests with status and cuts every open stream and watch,
// so that they reopen into it.
func burst(status, n, retryAfter int) func(*testing.T, *faultproxy.Proxy) {
	return func(t *testing.T, proxy *faultproxy.Proxy) {
		t.Helper()
		proxy.Add(faultproxy.Rule{Method: "GET", Times: n, Fault: faultproxy.Fault{Status: status, RetryAfter: retryAfter}})
		proxy.Down()
		proxy.Up()
		poll(t, 90*time.Second, fmt.Sprintf("the %d burst served", status), func(context.Context) (bool, error) { return proxy.Left() == 0, nil })
	}
}

var faultTable = []fault{
	{"kube-apiserver restart", component(localcluster.ActionRestart, localcluster.CompAPIServer)},
	{"30s outage", func(t *testing.T, _ *faultproxy.Proxy) {
		t.Helper()
		controlComponent(t, localcluster.ActionStop, localcluster.CompAPIServer)
		time.Sleep(30 * time.Second) // the outage itself: its length is the point
		controlComponent(t, localcluster.ActionStart, localcluster.CompAPIServer)
	}},
	{"etcd restart", component(localcluster.ActionRestart, localcluster.CompEtcd)},
	{"kwok restart", component(localcluster.ActionRestart, localcluster.CompKwok)},
	{"429 burst", burst(429, 30, 1)},
	{"503 burst", burst(503, 60, 0)},
}

// TestHeavyFaultTable (make e2e-faults) runs every long-running command through each fault of
// faultTable: `logs -f`, `wait` and `list --watch` on one job, `submit --wait` of a second,
// `submit --follow` of a third, `cancel` of a fourth and `delete-artifacts` of a finished staged
// fifth (results on versitygw), the pods of the last two held back so that the command is still
// waiting when the fault comes. Each command ends with the exit code it would have without the
// fault, the lines followed are exactly those of a final `logs`, the deleted jobs (and the
// results) leave nothing behind, and each says the outage in at most 4 stderr lines.
func TestHeavyFaultTable(t *testing.T) {
	for _, f := range faultTable {
		t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) { faultCase(t, f) })
	}
}

func faultCase(t *testing.T, f fault) {
	const ranks, lines = 4, 60
	ns := namespace(t)
	proxy, proxied := startProxy(t, ns)
	runFor := 75 * time.Second
	for _, s := range [][]string{
		submit(ns, "followed", ranks, lines, time.Second, runFor),
		submit(ns, "canceled", 2, 1, time.Second, time.Hour),
	} {
		if r := tao(t, kubeconfig, s...); r.code != 0 {
			t.Fatalf("submit: %s", r)
		}
	}
	s3 := s3server.Start(t)
	s3.MakeBucket(t, "results")
	staged := s3.StagedJob(t, client, ns, "staged", "succeed", "results")
	for _, k := range []string{"model.pth", "logs/train.log"} {
		s3.Put(t, "results", "results/staged/"+string(staged.UID)+"/results/"+k, []byte("0123456789"))
	}
	follow := start(t, proxied, "logs", "-f", "followed", "-n", ns)
	waiter := start(t, proxied, "wait", "followed", "-n", ns)
	watcher := start(t, proxied, "list", "--watch", "-n", ns)
	submitted := start(t, proxied, submit(ns, "submitted", ranks, lines, time.Second, runFor, "--wait")...)
	followedSubmit := start(t, proxied, submit(ns, "followed-submit", ranks, lines, time.Second, runFor, "--follow")...)
	firstLines(t, 3*time.Minute, ns, follow, ranks)
	firstLines(t, 3*time.Minute, ns, followedSubmit, ranks)
	canceler := holdAndRun(t, ns, proxied, "canceled", corev1.PodRunning, "cancel", "canceled", "-n", ns, "--grace-period", "0")
	// delete-artifacts of a finished staged job: its wait for the pods is held the same way,
	// then its results go.
	poll(t, 2*time.Minute, "staged to complete", func(ctx context.Context) (bool, error) {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, "staged", metav1.GetOptions{})
		return err == nil && j.Status.Succeeded == 1 && j.Status.CompletionTime != nil, nil
	})
	artifacts := holdAndRun(t, ns, proxied, "staged", corev1.PodSucceeded, "delete-artifacts", "staged", "-n", ns)

	f.inject(t, proxy)
	release(t, ns, "canceled")
	release(t, ns, "staged")

	for _, r := range []*run{follow, waiter, submitted, followedSubmit, canceler, artifacts} {
		if code := r.finish(t, 4*time.Minute); code != 0 {
			t.Errorf("%s", r)
		}
	}
	final := tao(t, kubeconfig, "logs", "followed", "-n", ns)
	sameLines(t, "logs -f", follow.out.String(), final.out.String(), ranks*lines)
	final = tao(t, kubeconfig, "logs", "followed-submit", "-n", ns)
	sameLines(t, "submit --follow", followedSubmit.out.String(), final.out.String(), ranks*lines)
	if !strings.HasSuffix(waiter.out.String(), "job.batch/followed Complete\n") {
		t.Errorf("wait printed %q", waiter.out.String())
	}
	// list --watch never ends by itself: it must have printed both jobs' ends, then it is
	// stopped like a user would (its exit code is then the signal's, not asserted).
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		out := watcher.out.String()
		return rowSays(out, "followed", "Complete") && rowSays(out, "submitted", "Complete"), nil
	}); err != nil {
		t.Fatalf("list --watch did not print both jobs Complete: %v\nstdout:\n%s\nstderr:\n%s", err, watcher.out.String(), watcher.errOut.String())
	}
	_ = watcher.cmd.Process.Kill()
	<-watcher.done
	// cancel returns once the Job and its pods are gone; the Service goes with the Job through
	// the garbage collector, which may take a moment more.
	if left := leftOf(t, ns, "canceled", false); left != "" {
		t.Errorf("cancel returned, but the job left %s", left)
	}
	poll(t, time.Minute, "the canceled job's Service gone", func(context.Context) (bool, error) {
		return leftOf(t, ns, "canceled", true) == "", nil
	})
	allowed := map[*run]*regexp.Regexp{
		// kwok answers "no logs found" for a container that has printed nothing yet, where a real
		// kubelet answers an empty log; on a loaded machine its first line can take long enough
		// for logs -f to say so once (tail's quietOpenFailures). Not the fault's doing.
		// A restarted kwok answers "no logs found" for a while for the containers it took over
		// (a restarted kubelet refuses the connection instead, which logs -f says once per node):
		// each rank's stream says so once.
		follow:         regexp.MustCompile(`^rank \d+ \(pod followed-[^)]*\): (no log yet|log stream failed), retrying: no logs found`),
		followedSubmit: regexp.MustCompile(`created$|^Following |^rank \d+ \(pod followed-submit-[^)]*\): (no log yet|log stream failed), retrying: no logs found`),
		waiter:         waitProgress, watcher: nil, canceler: regexp.MustCompile(`^job\.batch/canceled|[Cc]ancel|[Ww]aiting`),
		submitted: regexp.MustCompile(`created$|^Waiting|` + waitProgress.String()),
		artifacts: regexp.MustCompile(`^Waiting for the pods of job\.batch/staged to stop|^Deleting \d+ objects? under s3://results/results/staged/`),
	}
	if keys := s3.Keys(t, "results", "results/staged/"); len(keys) != 0 {
		t.Errorf("delete-artifacts returned, but left %v", keys)
	}
	if left := leftOf(t, ns, "staged", false); left != "" {
		t.Errorf("delete-artifacts returned, but the job left %s", left)
	}
	for _, r := range []*run{follow, waiter, watcher, submitted, followedSubmit, canceler, artifacts} {
		said := outageLines(t, r, allowed[r])
		t.Logf("%s: %d outage lines:\n%s", r.name, len(said), strings.Join(said, "\n"))
		if len(said) > 4 {
			t.Errorf("%s said %s in %d lines, want at most 4:\n%s", r.name, f.name, len(said), strings.Join(said, "\n"))
		}
	}
	t.Logf("%d requests through the proxy", len(proxy.Requests()))
}

// holdAndRun puts holdFinalizer on the job's pods once they are all in phase, starts the
// command args (cancel, delete-artifacts) through the proxy and returns once the garbage
// collector has marked the pods for deletion: the command is then waiting for them to go, which
// they cannot until release.
func holdAndRun(t *testing.T, ns, kc, job string, phase corev1.PodPhase, args ...string) *run {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job}
	poll(t, 2*time.Minute, job+"'s pods "+string(phase), func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != phase {
				return false, nil
			}
		}
		return true, nil
	})
	pods, err := client.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{holdFinalizer}}})
	for _, p := range pods.Items {
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, kc, args...)
	poll(t, time.Minute, job+"'s pods marked for deletion", func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return len(pods.Items) > 0, nil
	})
	select {
	case <-r.done:
		t.Fatalf("%s ended while the pods were held: %s", args[0], r)
	default:
	}
	return r
}

// release removes holdFinalizer from the job's pods (retrying while the control plane comes
// back), so that they and then the Job can go.
func release(t *testing.T, ns, job string) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	poll(t, 2*time.Minute, "the held pods released", func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if _, err := client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// leftOf names what is left of a job: the Job itself, pods, and with service its Service.
func leftOf(t *testing.T, ns, job string, service bool) string {
	t.Helper()
	ctx := context.Background()
	var left []string
	if _, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{}); err == nil {
		left = append(left, "the Job")
	}
	if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job}); err == nil && len(pods.Items) > 0 {
		left = append(left, fmt.Sprintf("%d pods", len(pods.Items)))
	}
	if _, err := client.CoreV1().Services(ns).Get(ctx, job, metav1.GetOptions{}); service && err == nil {
		left = append(left, "the Service")
	}
	return strings.Join(left, ", ")
}

// rowSays reports whether a table printed by list holds a row for job with status.
func rowSays(out, job, status string) bool {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(job) + `\s+` + regexp.QuoteMeta(status) + `\b`).MatchString(out)
}
