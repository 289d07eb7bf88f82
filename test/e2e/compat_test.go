//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// The results of a compatibility row: pass; degraded, when the command succeeded but the user
// saw a warning or the server dropped part of the feature; fail, for a wrong result or exit
// code; n/a, for a feature this cluster cannot show (the row says why).
const (
	compatPass     = "pass"
	compatDegraded = "degraded"
	compatFail     = "fail"
	compatNA       = "n/a"
)

// compatRow is one line of COMPAT_REPORT, the file hack/compattable turns into the table.
type compatRow struct {
	Minor   string `json:"minor"`
	Feature string `json:"feature"`
	Result  string `json:"result"`
	Detail  string `json:"detail"`
}

// compat is one feature's check. It runs the plugin, keeps the warnings the user saw, and
// decides its row when the subtest ends, however it ends, so that no feature hides another.
type compat struct {
	t *testing.T
	// expected are stderr warnings that the feature shows on every release of the local
	// cluster (top's "no GPU numbers" on KWOK nodes): they say nothing about the server.
	expected []string
	reason   string
	degraded []string
	na       string
}

// warningLine matches what a user reads as a warning: the plugin's and the API server's
// "Warning: ..." lines, and klog's warning and error lines (client-go logs there when it falls
// back from a feature an older server lacks).
var warningLine = regexp.MustCompile(`^(Warning: |[WE]\d{4} \d\d:\d\d:\d\d)`)

func (c *compat) tao(args ...string) result {
	c.t.Helper()
	return c.taoEnv(nil, args...)
}

// taoEnv is tao with variables added to the plugin's environment (S3's).
func (c *compat) taoEnv(env []string, args ...string) result {
	c.t.Helper()
	r := tao(c.t, env, args...)
	for _, line := range strings.Split(r.stderr, "\n") {
		line = strings.TrimSpace(line)
		if !warningLine.MatchString(line) || slices.ContainsFunc(c.expected, func(e string) bool { return strings.Contains(line, e) }) {
			continue
		}
		c.degrade(line)
	}
	return r
}

// degrade records what the user lost on this release while the feature still worked.
func (c *compat) degrade(what string) {
	if !slices.Contains(c.degraded, what) {
		c.degraded = append(c.degraded, what)
	}
}

// fatalf fails the feature, keeping the first reason for its row.
func (c *compat) fatalf(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if c.reason == "" {
		c.reason = msg
	}
	c.t.Fatal(msg)
}

// want fails the feature unless the command exited with code.
func (c *compat) want(what string, r result, code int) {
	c.t.Helper()
	if r.code != code {
		c.t.Log(r)
		c.fatalf("%s: exit %d, want %d: %s", what, r.code, code, lastLine(r))
	}
}

func (c *compat) poll(timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	c.t.Helper()
	if err := pollErr(timeout, cond); err != nil {
		c.fatalf("waiting for %s: %v", what, err)
	}
}

func (c *compat) row() (string, string) {
	switch {
	case c.t.Failed() && c.reason == "":
		return compatFail, "the check stopped early: see the go test log"
	case c.t.Failed():
		return compatFail, c.reason
	case c.na != "":
		return compatNA, c.na
	case len(c.degraded) > 0:
		return compatDegraded, strings.Join(c.degraded, "; ")
	}
	return compatPass, ""
}

// lastLine is the line of a command's output that says why it failed: its last on stderr.
func lastLine(r result) string {
	out := strings.TrimSpace(r.stderr)
	if out == "" {
		out = strings.TrimSpace(r.stdout)
	}
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return out
}

// TestCompat is the compatibility subset: what a user relies on from submit to cancel, on
// simulated nodes only, so that it runs on every release the local cluster builds (`make
// e2e-compat` runs it on each minor of COMPAT_MINORS; `make e2e` on the default). Each feature
// is a parallel subtest of its own namespace and job, so that one failure leaves the others'
// rows standing.
func TestCompat(t *testing.T) {
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	features := []compatFeature{
		{"submit single-rank", compatSingleRank},
		{"submit multi-node", compatMultiNode},
		{"--retries per index", compatRetries},
		{"--nodes MIN:MAX, scale", compatElastic},
		{"status", compatStatus},
		{"list", compatList},
		{"wait", compatWait},
		{"logs -f", compatLogsFollow},
		{"replicas", compatReplicas},
		{"diagnose", compatDiagnose},
		{"cancel", compatCancel},
		{"top", compatTop},
		{"--queue (Kueue)", compatQueue},
		{"results", compatResults},
		{"delete-artifacts", compatDeleteArtifacts},
	}
	var mu sync.Mutex
	rows := make([]compatRow, len(features))
	t.Cleanup(func() {
		// Features that -run left out have no row.
		rows = slices.DeleteFunc(rows, func(r compatRow) bool { return r.Feature == "" })
		for _, r := range rows {
			t.Logf("%-22s %-8s %s", r.Feature, r.Result, r.Detail)
		}
		path := os.Getenv("COMPAT_REPORT")
		if path == "" {
			return
		}
		data, err := json.MarshalIndent(rows, "", "  ")
		if err == nil {
			err = os.WriteFile(path, append(data, '\n'), 0o644)
		}
		if err != nil {
			t.Errorf("COMPAT_REPORT: %v", err)
		}
	})
	check := func(t *testing.T, i int) {
		f := features[i]
		c := &compat{t: t}
		defer func() {
			result, detail := c.row()
			mu.Lock()
			rows[i] = compatRow{Minor: v.GitVersion, Feature: f.name, Result: result, Detail: detail}
			mu.Unlock()
		}()
		f.run(c)
	}
	// The queue check may start Kueue, which changes what submit says about every multi-node
	// job: it runs once the others, side by side, are done.
	queue := slices.IndexFunc(features, func(f compatFeature) bool { return f.name == "--queue (Kueue)" })
	t.Run("features", func(t *testing.T) {
		for i, f := range features {
			if i == queue {
				continue
			}
			t.Run(f.name, func(t *testing.T) {
				t.Parallel()
				check(t, i)
			})
		}
	})
	t.Run(features[queue].name, func(t *testing.T) { check(t, queue) })
}

// compatFeature is one row of the table and the check that fills it.
type compatFeature struct {
	name string
	run  func(c *compat)
}

// compatSubmit submits name with one GPU per rank (the subtests run at once and share the
// cluster's GPUs) and the simulator's annotations, and fails the feature unless it was created.
func compatSubmit(c *compat, ns, name string, nodes int, extra []string, annotations ...string) result {
	c.t.Helper()
	args := []string{"submit", name, "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", fmt.Sprint(nodes)}
	args = append(args, extra...)
	for _, a := range annotations {
		args = append(args, "--annotation", sim+a)
	}
	r := c.tao(append(args, "--", "python", "train.py")...)
	c.want("submit", r, 0)
	return r
}

// compatRunning waits until n pods of the job run and returns them by rank.
func compatRunning(c *compat, ns, job string, n int) map[string]corev1.Pod {
	c.t.Helper()
	byRank := map[string]corev1.Pod{}
	c.poll(60*time.Second, fmt.Sprintf("%d running ranks of %s", n, job), func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return false, err
		}
		clear(byRank)
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				byRank[p.Annotations[batchv1.JobCompletionIndexAnnotation]] = p
			}
		}
		return len(byRank) == n, nil
	})
	return byRank
}

func compatSingleRank(c *compat) {
	ns := namespace(c.t)
	r := compatSubmit(c, ns, "one", 1, nil, "run-duration=1s")
	if r.stdout != "job.batch/one created\n" {
		c.fatalf("submit printed %q, want the Job created", r.stdout)
	}
	c.poll(60*time.Second, "job one to complete", jobFinished(ns, "one", batchv1.JobComplete))
}

func compatMultiNode(c *compat) {
	ns := namespace(c.t)
	r := compatSubmit(c, ns, "ddp", 2, nil, "fate=run-forever")
	if r.stdout != "job.batch/ddp created\nservice/ddp created\n" {
		c.fatalf("submit printed %q, want the Job and the Service created", r.stdout)
	}
	ctx := context.Background()
	job, err := client.BatchV1().Jobs(ns).Get(ctx, "ddp", metav1.GetOptions{})
	if err != nil {
		c.fatalf("get job: %v", err)
	}
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion ||
		job.Spec.Completions == nil || *job.Spec.Completions != 2 || job.Spec.Parallelism == nil || *job.Spec.Parallelism != 2 {
		c.fatalf("the Job is not Indexed with 2 completions and parallelism 2: %+v", job.Spec)
	}
	svc, err := client.CoreV1().Services(ns).Get(ctx, "ddp", metav1.GetOptions{})
	if err != nil {
		c.fatalf("get service: %v", err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses || svc.Spec.Selector["job-name"] != "ddp" ||
		len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != job.UID {
		c.fatalf("the Service is not the Job's headless one: %+v", svc.Spec)
	}
	// The rendezvous: every rank finds rank 0 by the Service's DNS name and learns its own rank
	// from the completion index the Job controller writes on the pod.
	env := map[string]corev1.EnvVar{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	nodeRank := env["NODE_RANK"].ValueFrom
	if env["MASTER_ADDR"].Value != "ddp-0.ddp" || env["MASTER_PORT"].Value == "" || env["WORLD_SIZE"].Value != "2" || env["NNODES"].Value != "2" ||
		nodeRank == nil || nodeRank.FieldRef == nil || !strings.Contains(nodeRank.FieldRef.FieldPath, batchv1.JobCompletionIndexAnnotation) {
		c.fatalf("rendezvous environment: MASTER_ADDR %q, MASTER_PORT %q, WORLD_SIZE %q, NNODES %q, NODE_RANK %+v",
			env["MASTER_ADDR"].Value, env["MASTER_PORT"].Value, env["WORLD_SIZE"].Value, env["NNODES"].Value, nodeRank)
	}
	for rank, p := range compatRunning(c, ns, "ddp", 2) {
		if host := p.Spec.Hostname + "." + p.Spec.Subdomain; host != "ddp-"+rank+".ddp" {
			c.fatalf("rank %s's pod %s is %s, want ddp-%s.ddp", rank, p.Name, host, rank)
		}
		// The label came later than the annotation (PodIndexLabel): a server without it leaves
		// selectors by rank, as kubectl users write them, without a match.
		if got, ok := p.Labels[batchv1.JobCompletionIndexAnnotation]; !ok {
			c.degrade("pods have no " + batchv1.JobCompletionIndexAnnotation + " label (the server's PodIndexLabel is off)")
		} else if got != rank {
			c.fatalf("pod %s: index label %q, annotation %q", p.Name, got, rank)
		}
	}
}

func compatRetries(c *compat) {
	ns := namespace(c.t)
	r := compatSubmit(c, ns, "rt", 2, []string{"--retries", "1"}, "run-duration=8s")
	ctx := context.Background()
	job, err := client.BatchV1().Jobs(ns).Get(ctx, "rt", metav1.GetOptions{})
	if err != nil {
		c.fatalf("get job: %v", err)
	}
	// A server that drops the per-index fields must be said to have, once, on stderr; the
	// warning itself made the row degraded.
	for field, kept := range map[string]bool{
		"backoffLimitPerIndex": job.Spec.BackoffLimitPerIndex != nil,
		"podReplacementPolicy": job.Spec.PodReplacementPolicy != nil,
		"podFailurePolicy":     job.Spec.PodFailurePolicy != nil,
	} {
		if !kept && !strings.Contains(r.stderr, field) {
			c.fatalf("the server dropped spec.%s and submit said nothing: %s", field, r)
		}
	}
	// Rank 1 dies once (exit 1, as of an NCCL error) and its replacement completes the job.
	victim := compatRunning(c, ns, "rt", 2)["1"]
	label(c.t, ns, victim.Name, crashLabel, "1")
	c.poll(90*time.Second, "job rt to complete after rank 1's retry", jobFinished(ns, "rt", batchv1.JobComplete))
	job, err = client.BatchV1().Jobs(ns).Get(ctx, "rt", metav1.GetOptions{})
	if err != nil {
		c.fatalf("get job: %v", err)
	}
	perRank := map[string]int{}
	for _, p := range jobPods(c.t, ns, "rt") {
		perRank[p.Annotations[batchv1.JobCompletionIndexAnnotation]]++
	}
	if job.Status.Failed != 1 || job.Status.Succeeded != 2 || perRank["0"] != 1 || perRank["1"] != 2 {
		c.fatalf("failed %d, succeeded %d, pods per rank %v; want 1, 2 and rank 1 tried twice", job.Status.Failed, job.Status.Succeeded, perRank)
	}
}

// compatElastic submits an elastic job (1:3) on the simulated nodes, scales it to 2 and to 3 and
// checks the pods (rank 0 always among them) and status at each size; below Kubernetes 1.31 submit must refuse it, with the
// reason, and create nothing (the row is n/a then, saying so).
func compatElastic(c *compat) {
	ns := namespace(c.t)
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		c.fatalf("server version: %v", err)
	}
	minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	args := []string{"submit", "el", "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", "1:3", "--stager-image", "stager:dev",
		"--annotation", sim + "fate=run-forever", "--", "python", "train.py"}
	r := c.tao(args...)
	if minor < 31 {
		c.want("submit --nodes 1:3", r, 2)
		if !strings.Contains(r.stderr, "needs Kubernetes 1.31 or newer") {
			c.fatalf("submit --nodes 1:3 on %s: %q, want the reason", v.GitVersion, lastLine(r))
		}
		if jobs, err := client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(jobs.Items) != 0 {
			c.fatalf("a refused elastic submit left %d Jobs (%v)", len(jobs.Items), err)
		}
		said := lastLine(r)
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.Contains(l, "needs Kubernetes 1.31 or newer") {
				said = strings.TrimPrefix(strings.TrimSpace(l), "error: ")
			}
		}
		c.na = "refused, as it must be: " + said
		return
	}
	c.want("submit --nodes 1:3", r, 0)
	m := regexp.MustCompile(`starting with (\d) ranks of 1:3`).FindStringSubmatch(r.stderr)
	if m == nil {
		c.fatalf("submit did not say the size it chose: %q", r.stderr)
	}
	size, _ := strconv.Atoi(m[1])
	compatRunning(c, ns, "el", size)
	for _, n := range []int{2, 3} {
		// No --wait: it waits for torchrun's rendezvous, which simulated pods never log.
		r := c.tao("scale", "el", "-n", ns, "--nodes", strconv.Itoa(n))
		c.want(fmt.Sprintf("scale --nodes %d", n), r, 0)
		running := compatRunning(c, ns, "el", n)
		if _, ok := running["0"]; !ok {
			c.fatalf("at %d ranks, rank 0 is not running: %v", n, running)
		}
		r = c.tao("status", "el", "-n", ns, "-o", "jsonpath={.nodes} {.nodesRange}")
		c.want("status", r, 0)
		if want := strconv.Itoa(n) + " 1:3"; r.stdout != want {
			c.fatalf("status at %d ranks: %q, want %q", n, r.stdout, want)
		}
	}
	// The simulated kubelet never ends a deleted pod that the Job controller still tracks: the
	// job is canceled, as a user would, rather than left to the namespace's deletion.
	c.want("cancel", c.tao("cancel", "el", "-n", ns, "--timeout", "60s"), 0)
}

func compatStatus(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "st", 2, nil, "fate=run-forever")
	var last string
	c.poll(60*time.Second, "status to say both ranks run", func(context.Context) (bool, error) {
		r := c.tao("status", "st", "-n", ns, "-o", "json")
		c.want("status -o json", r, 0)
		var s struct{ Status, Message string }
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			return false, fmt.Errorf("status -o json: %v", err)
		}
		last = s.Status + ": " + s.Message
		return s.Status == "Running" && s.Message == "2/2 ranks running", nil
	})
	r := c.tao("status", "st", "-n", ns)
	c.want("status", r, 0)
	if !strings.Contains(r.stdout, "Running") {
		c.fatalf("status (last JSON %q) printed %q, want Running", last, r.stdout)
	}
}

func compatList(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "ls", 2, nil, "fate=run-forever")
	var out string
	c.poll(60*time.Second, "list to show the running job", func(context.Context) (bool, error) {
		r := c.tao("list", "-n", ns)
		c.want("list", r, 0)
		out = r.stdout
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 4 && f[0] == "ls" && f[1] == "Running" && f[2] == "1x2" && f[3] == "2/2" {
				return true, nil
			}
		}
		return false, nil
	})
}

func compatWait(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "w", 2, nil, "run-duration=3s")
	r := c.tao("wait", "w", "-n", ns, "--timeout", "90s")
	c.want("wait", r, 0)
	if r.stdout != "job.batch/w Complete\n" {
		c.fatalf("wait printed %q, want job.batch/w Complete", r.stdout)
	}
	// A job whose ranks have run never goes back to Pending: a server without the
	// SuccessCriteriaMet condition once showed that between the last rank and Complete.
	if strings.Contains(r.stderr, "Running -> Pending") {
		c.fatalf("wait showed a finished rank as Pending: %q", r.stderr)
	}
}

func compatLogsFollow(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "lf", 2, nil, "run-duration=3s", "log-lines=4", "log-interval=500ms")
	r := c.tao("logs", "-f", "lf", "-n", ns)
	c.want("logs -f", r, 0)
	// Followed ranks interleave as their lines come; each rank's own lines keep their order.
	perRank := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		rank, _, _ := strings.Cut(line, "] ")
		perRank[rank+"]"] = append(perRank[rank+"]"], line)
	}
	for _, rank := range []int{0, 1} {
		got := strings.Join(perRank[fmt.Sprintf("[rank %d]", rank)], "\n") + "\n"
		if want := rankLines([]int{rank}, 4); got != want {
			c.fatalf("logs -f printed rank %d's lines as %q, want %q", rank, got, want)
		}
	}
	if len(perRank) != 2 {
		c.fatalf("logs -f printed lines of other than ranks 0 and 1: %q", r.stdout)
	}
}

func compatReplicas(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "rp", 2, nil, "fate=run-forever")
	var got []replica
	// While the ranks start, replicas rightly warns of a partial start: that says nothing about
	// the server, so only the reading once both run counts for the row.
	c.poll(60*time.Second, "replicas to list both ranks running", func(context.Context) (bool, error) {
		r := tao(c.t, nil, "replicas", "rp", "-n", ns, "-o", "json")
		c.want("replicas -o json", r, 0)
		got = nil
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			return false, fmt.Errorf("replicas -o json: %v", err)
		}
		ranks := map[int]bool{}
		for _, p := range got {
			if p.Phase == "Running" && p.Node != "" {
				ranks[p.Rank] = true
			}
		}
		return len(got) == 2 && ranks[0] && ranks[1], nil
	})
	c.want("replicas", c.tao("replicas", "rp", "-n", ns), 0)
}

func compatDiagnose(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "bad", 2, nil, "fate=exit", "exit-code=1", "run-duration=1s")
	c.want("wait for the failing job", c.tao("wait", "bad", "-n", ns, "--timeout", "90s"), 9)
	r := c.tao("diagnose", "bad", "-n", ns, "-o", "json")
	c.want("diagnose -o json", r, 0)
	var a analysis
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		c.fatalf("diagnose -o json: %v", err)
	}
	exit1 := false
	for _, e := range a.Events {
		exit1 = exit1 || e.ExitCode != nil && *e.ExitCode == 1
	}
	if a.ErrClass == nil || *a.ErrClass != "ERR_PROGRAM" || a.Status != "Error" || !exit1 {
		c.fatalf("diagnose: class %v, status %q, events %+v; want ERR_PROGRAM, Error and a rank's exit code 1", a.ErrClass, a.Status, a.Events)
	}
	r = c.tao("diagnose", "bad", "-n", ns)
	c.want("diagnose", r, 0)
	if !strings.Contains(r.stdout, "ERR_PROGRAM") {
		c.fatalf("diagnose printed %q, want the class ERR_PROGRAM", r.stdout)
	}
}

func compatCancel(c *compat) {
	ns := namespace(c.t)
	compatSubmit(c, ns, "cx", 2, nil, "fate=run-forever")
	compatRunning(c, ns, "cx", 2)
	r := c.tao("cancel", "cx", "-n", ns, "--timeout", "60s")
	c.want("cancel", r, 0)
	if r.stdout != "job.batch/cx canceled\n" {
		c.fatalf("cancel printed %q, want job.batch/cx canceled", r.stdout)
	}
	// cancel returns once everything is gone: what is left now is left for good.
	ctx := context.Background()
	jobs, err1 := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	svcs, err2 := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	pods, err3 := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err1 != nil || err2 != nil || err3 != nil {
		c.fatalf("listing what cancel left: %v %v %v", err1, err2, err3)
	}
	if n := len(jobs.Items) + len(svcs.Items) + len(pods.Items); n != 0 {
		c.fatalf("cancel left %d jobs, %d services and %d pods", len(jobs.Items), len(svcs.Items), len(pods.Items))
	}
}

func compatTop(c *compat) {
	// KWOK's pods have no GPU to read, no exporter beside them, and no exec for nvidia-smi.
	c.expected = []string{"Warning: no GPU numbers"}
	ns := namespace(c.t)
	compatSubmit(c, ns, "tp", 2, nil, "fate=run-forever")
	running := compatRunning(c, ns, "tp", 2)
	r := c.tao("top", "tp", "-n", ns, "-o", "json")
	c.want("top -o json", r, 0)
	var doc struct {
		Status        string `json:"status"`
		MetricsSource string `json:"metricsSource"`
		Ranks         []struct {
			Rank int    `json:"rank"`
			Pod  string `json:"pod"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		c.fatalf("top -o json: %v", err)
	}
	listed := map[string]string{}
	for _, rk := range doc.Ranks {
		listed[fmt.Sprint(rk.Rank)] = rk.Pod
	}
	if doc.Status != "Running" || doc.MetricsSource != "none" || listed["0"] != running["0"].Name || listed["1"] != running["1"].Name {
		c.fatalf("top: status %q, metricsSource %q, ranks %v; want Running, none and both ranks' pods", doc.Status, doc.MetricsSource, listed)
	}
	c.want("top", c.tao("top", "tp", "-n", ns), 0)
}

// kueueTestedFrom is the first minor Kueue v0.17.0's own tests cover: below it a queued job
// that does not run is what the release gives, said as degraded, not a failure.
const kueueTestedFrom = 33

// compatQueue submits through Kueue where the cluster runs it. make e2e-compat sets
// COMPAT_KUEUE=1: Kueue's real manager is then started here (and removed after); elsewhere a
// cluster without Kueue gives the row n/a.
func compatQueue(c *compat) {
	if _, err := client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2"); err != nil {
		if !apierrors.IsNotFound(err) {
			c.fatalf("discovering Kueue's API: %v", err)
		}
		if os.Getenv("COMPAT_KUEUE") != "1" {
			c.na = "not run: Kueue (kueue.x-k8s.io/v1beta2) not installed"
			return
		}
		if _, err := launcher(c.t, "kueue-up"); err != nil {
			c.softFail(fmt.Sprintf("Kueue v0.17.0 did not start on this release: %s", firstLine(err.Error())))
			return
		}
		c.t.Cleanup(func() {
			if _, err := launcher(c.t, "kueue-down"); err != nil {
				c.t.Error(err)
			}
		})
	}
	ns := namespace(c.t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		c.fatalf("%v", err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	// Cluster-scoped queue objects outlive the namespace: each goes when the check ends.
	cq := "compat-" + rand.String(5)
	createClusterQueue(c.t, dyn, cq, 8)
	c.t.Cleanup(func() {
		ctx := context.Background()
		_ = dyn.Resource(kueueResource("clusterqueues")).Delete(ctx, cq, metav1.DeleteOptions{})
		_ = dyn.Resource(kueueResource("resourceflavors")).Delete(ctx, cq+"-gpu", metav1.DeleteOptions{})
	})
	createKueueObject(c.t, dyn, "localqueues", ns, map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": "compat", "namespace": ns},
		"spec":     map[string]any{"clusterQueue": cq},
	})
	args := []string{"submit", "q", "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", "2", "--queue", "compat",
		"--annotation", sim + "run-duration=2s", "--", "python", "train.py"}
	if r := c.tao(args...); r.code != 0 {
		c.softFail(fmt.Sprintf("submit --queue: exit %d: %s", r.code, lastLine(r)))
		return
	}
	if r := c.tao("wait", "q", "-n", ns, "--timeout", "90s"); r.code != 0 {
		c.softFail(fmt.Sprintf("the queued job did not complete: wait exit %d: %s", r.code, lastLine(r)))
	}
}

// softFail is a failure of Kueue's part: on a release below kueueTestedFrom the row is degraded
// with it (Kueue does not claim that release); on the others the feature fails.
func (c *compat) softFail(msg string) {
	c.t.Helper()
	v, err := client.Discovery().ServerVersion()
	minor := 0
	if err == nil {
		minor, _ = strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	}
	if minor > 0 && minor < kueueTestedFrom {
		c.degrade(fmt.Sprintf("%s (Kueue v0.17.0's tests cover 1.%d and later)", msg, kueueTestedFrom))
		return
	}
	c.fatalf("%s", msg)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// compatRealNodeJob runs a job whose files only a container that really runs writes (the
// simulated pods write none): a 2-rank job that meets at its rendezvous on the real node, its
// outputs and every rank's log kept in S3 (the test server, on the node's bridge). It returns
// the S3 server, the plugin's S3 environment and the run's prefix, or nil when the cluster has
// no real node (the row is then n/a with the launcher's reason).
func compatRealNodeJob(c *compat, ns, job string) (*s3server.Server, []string, string) {
	c.t.Helper()
	if os.Getenv("TAO_REAL_NODE") == "" {
		c.na = "needs the real node (pods that really run); none on this cluster: " + noRealNodeReason()
		return nil, nil, ""
	}
	n := realNode(c.t)
	if n.StagerImage == "" {
		c.fatalf("the real node has no stager image (make stager-image)")
	}
	srv := s3server.StartOn(c.t, n.IP)
	srv.MakeBucket(c.t, "results")
	env := srv.Env("results")
	args := n.submitArgs(ns, job, []string{"--nodes", "2", "--stager-image", n.StagerImage, "--shm-size", "0", "--output-path", "/results"},
		trainerPath, "--results", "/results", "--steps", "2")
	c.want("submit", c.taoEnv(env, args...), 0)
	c.poll(3*time.Minute, "job "+job+" to complete", jobFinished(ns, job, batchv1.JobComplete))
	return srv, env, jobPrefix(c.t, ns, job)
}

// compatResults: results lists exactly what the run left in S3: rank 0's outputs and each
// rank's log archive.
func compatResults(c *compat) {
	ns := namespace(c.t)
	srv, env, prefix := compatRealNodeJob(c, ns, "kept")
	if srv == nil {
		return
	}
	var want []string
	for _, k := range srv.Keys(c.t, "results", prefix) {
		want = append(want, strings.TrimPrefix(k, prefix))
	}
	pods := rankPods(c.t, ns, "kept")
	for _, k := range []string{"results/rank-0/ckpt-000002", strings.TrimPrefix(s3layout.LogArchiveKey(prefix, 0, pods[0]), prefix),
		strings.TrimPrefix(s3layout.LogArchiveKey(prefix, 1, pods[1]), prefix)} {
		if !slices.Contains(want, k) {
			c.fatalf("the run kept %q in S3, without %s", want, k)
		}
	}
	r := c.taoEnv(env, "results", "kept", "-n", ns, "-o", "jsonpath={.objects[*].key}")
	c.want("results", r, 0)
	got := strings.Fields(r.stdout)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		c.fatalf("results listed %q, want what S3 holds: %q", got, want)
	}
}

// compatDeleteArtifacts: delete-artifacts removes everything the run kept.
func compatDeleteArtifacts(c *compat) {
	ns := namespace(c.t)
	srv, env, prefix := compatRealNodeJob(c, ns, "removed")
	if srv == nil {
		return
	}
	if len(srv.Keys(c.t, "results", prefix)) == 0 {
		c.fatalf("the run kept nothing in S3 under %s", prefix)
	}
	r := c.taoEnv(env, "delete-artifacts", "removed", "-n", ns)
	c.want("delete-artifacts", r, 0)
	if !strings.HasSuffix(r.stdout, "removed from s3://results/"+prefix+"\n") {
		c.fatalf("delete-artifacts printed %q, want the prefix removed", r.stdout)
	}
	if keys := srv.Keys(c.t, "results", prefix); len(keys) != 0 {
		c.fatalf("left after delete-artifacts: %q", keys)
	}
}
