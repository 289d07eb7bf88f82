//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// rankPod waits until the job's rank has a pod in phase and returns its name.
func rankPod(t *testing.T, ns, job string, rank int, phase corev1.PodPhase) string {
	t.Helper()
	var name string
	poll(t, 60*time.Second, fmt.Sprintf("rank %d of %s %s", rank, job, phase), func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			if (idx == strconv.Itoa(rank) || idx == "" && rank == 0) && p.Status.Phase == phase {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}

// kwokObject creates a kwok Exec or PortForward for one pod: with it, the local cluster's
// simulated kubelet runs `exec` commands on this machine (in dir) or forwards to a local port.
// Pods without one have neither, as before.
func kwokObject(t *testing.T, ns, resource, kind, pod string, spec map[string]any, ready func() bool) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": pod, "namespace": ns},
		"spec":     spec,
	}}
	gvr := schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: resource}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating kwok %s for %s: %v", kind, pod, err)
	}
	// kwok learns of it through a watch: ready says when it has.
	poll(t, 30*time.Second, "kwok serving the "+kind+" of "+pod, func(context.Context) (bool, error) { return ready(), nil })
}

func TestExecAndPortForwardResolveRanks(t *testing.T) {
	ns := namespace(t)
	contains(t, tao(t, nil, "exec", "nope", "-n", ns, "--", "true"), 3, `jobs.batch "nope" not found`)
	contains(t, tao(t, nil, "port-forward", "nope", "-n", ns, "6006"), 3, `jobs.batch "nope" not found`)
	contains(t, tao(t, nil, "exec", "nope", "-n", ns), 2, `put the command after "--"`)
	contains(t, tao(t, nil, "port-forward", "nope", "-n", ns, "tb"), 2, `invalid port "tb"`)

	// A finished rank, and a rank the job does not have.
	submitJob(t, ns, "done", "--gpus", "1", "--nodes", "2", "--annotation", "sim.kubectl-tao.dev/run-duration=1s")
	poll(t, 60*time.Second, "done Complete", statusIs(t, ns, "done", "Complete"))
	p1 := rankPod(t, ns, "done", 1, corev1.PodSucceeded)
	contains(t, tao(t, nil, "exec", "job/done", "-n", ns, "--rank", "1", "--", "true"), 1,
		"rank 1 of job.batch/done is not running (pod "+p1+" Succeeded); ranks: 0 Succeeded, 1 Succeeded")
	contains(t, tao(t, nil, "exec", "done", "-n", ns, "--rank", "2", "--", "true"), 3,
		"job.batch/done has no rank 2: its ranks are 0..1; ranks: 0 Succeeded, 1 Succeeded")
	contains(t, tao(t, nil, "port-forward", "job.batch/done", "-n", ns, "--rank", "0", "6006"), 1, "rank 0 of job.batch/done is not running")

	// A rank stuck pulling its image.
	submitJob(t, ns, "pull", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/fate=image-pull-backoff")
	p0 := rankPod(t, ns, "pull", 0, corev1.PodPending)
	contains(t, tao(t, nil, "exec", "pull", "-n", ns, "--", "true"), 1, "rank 0 of job.batch/pull is not running (pod "+p0+" Pending)")
}

func TestExecRoundTrip(t *testing.T) {
	ns := namespace(t)
	submitJob(t, ns, "ddp", "--gpus", "1", "--nodes", "2", "--annotation", "sim.kubectl-tao.dev/fate=run-forever")
	p1 := rankPod(t, ns, "ddp", 1, corev1.PodRunning)

	// The running rank is resolved and the request reaches its kubelet (kwok), which has no exec
	// configured for this pod yet: the error is the exec stream's and names the pod.
	contains(t, tao(t, nil, "exec", "ddp", "-n", ns, "--rank", "1", "--", "true"), 1,
		"exec in pod "+p1+" (rank 1 of job.batch/ddp)", `no exec found for container "tao"`)

	dir := t.TempDir()
	kwokObject(t, ns, "execs", "Exec", p1, map[string]any{"execs": []any{map[string]any{
		"local": map[string]any{"workDir": dir, "envs": []any{map[string]any{"name": "SIM_RANK", "value": "1"}}},
	}}}, func() bool { return tao(t, nil, "exec", "ddp", "-n", ns, "--rank", "1", "--", "true").code == 0 })
	r := tao(t, nil, "exec", "ddp", "-n", ns, "--rank", "1", "--", "sh", "-c", `echo "rank $SIM_RANK in $(pwd)"; echo to-stderr >&2`)
	if r.code != 0 || r.stdout != "rank 1 in "+dir+"\n" || !strings.Contains(r.stderr, "to-stderr") {
		t.Fatalf("exec round trip: %s", r)
	}
	// stdin with -i. (kwok never closes the command's stdin, so read one line, not to EOF.)
	cmd := exec.Command(binary, "exec", "-i", "ddp", "-n", ns, "--rank", "1", "--", "head", "-n1")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	cmd.Stdin = strings.NewReader("from stdin\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "from stdin\n" {
		t.Fatalf("exec -i: %q, %v", out, err)
	}
	// A failing remote command fails exec. (A real kubelet reports its exit status, which exec
	// then exits with; kwok reports only an error, so this checks the failure, not the number.)
	contains(t, tao(t, nil, "exec", "ddp", "-n", ns, "--rank", "1", "--", "sh", "-c", "exit 7"), 1, "exit status 7")
}

func TestPortForwardRoundTrip(t *testing.T) {
	ns := namespace(t)
	submitJob(t, ns, "tb", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/fate=run-forever")
	p0 := rankPod(t, ns, "tb", 0, corev1.PodRunning)

	// A stand-in for TensorBoard on this machine; kwok forwards the pod's port 6006 to it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tensorboard of "+r.URL.Path) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	kwokObject(t, ns, "portforwards", "PortForward", p0, map[string]any{"forwards": []any{map[string]any{
		"ports": []any{int64(6006)}, "target": map[string]any{"port": int64(port), "address": "127.0.0.1"},
	}}}, func() bool { return forwardOnce(ns, "tb") == "tensorboard of /probe" })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "port-forward", "tb", "-n", ns, ":6006")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// "Forwarding from 127.0.0.1:PORT -> 6006" on stdout, as kubectl prints it, names the local port.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> 6006`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("first line %q, %v; stderr %s", line, err, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	resp, err := http.Get("http://127.0.0.1:" + m[1] + "/data/runs")
	if err != nil {
		t.Fatalf("through the forward: %v; stderr %s", err, stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "tensorboard of /data/runs" {
		t.Fatalf("through the forward: %q", body)
	}
	// Ctrl-C ends it cleanly.
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("port-forward after Ctrl-C: %v; stderr %s", err, stderr.String())
	}
}

// forwardOnce runs `port-forward JOB :6006`, GETs /probe through it and returns the body ("" on
// any failure); the forward is then stopped.
func forwardOnce(ns, job string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "port-forward", job, "-n", ns, ":6006")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	stdout, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		return ""
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> 6006`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	resp, err := http.Get("http://127.0.0.1:" + m[1] + "/probe")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// defaultsFile writes a defaults file holding config and returns the environment that makes
// kubectl tao read it, and the file's path.
func defaultsFile(t *testing.T, config string) (env []string, path string) {
	t.Helper()
	xdg := t.TempDir()
	path = filepath.Join(xdg, "kubectl-tao", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"XDG_CONFIG_HOME=" + xdg}, path
}

func TestDefaultsFileSetsSubmitFlags(t *testing.T) {
	ns := namespace(t)
	env, path := defaultsFile(t, `apiVersion: kubectl-tao.dev/v1alpha1
kind: Config
submit:
  image: nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt
  shm-size: 32Gi
  toleration: [dedicated=ml:NoSchedule]
  gpus: 2
`)
	job := func(r result) batchv1.Job {
		t.Helper()
		var list struct{ Items []json.RawMessage }
		var j batchv1.Job
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Items) == 0 || json.Unmarshal(list.Items[0], &j) != nil {
			t.Fatalf("dry run: %s", r)
		}
		return j
	}
	shm := func(j batchv1.Job) string {
		for _, v := range j.Spec.Template.Spec.Volumes {
			if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
				return v.EmptyDir.SizeLimit.String()
			}
		}
		return ""
	}
	tolerates := func(j batchv1.Job, key string) bool {
		for _, tol := range j.Spec.Template.Spec.Tolerations {
			if tol.Key == key {
				return true
			}
		}
		return false
	}

	j := job(tao(t, env, "submit", "train", "-n", ns, "--dry-run=client", "-o", "json", "--", "python", "train.py"))
	c := j.Spec.Template.Spec.Containers[0]
	if c.Image != "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt" || shm(j) != "32Gi" || !tolerates(j, "dedicated") || c.Resources.Limits.Name("nvidia.com/gpu", "").Value() != 2 {
		t.Fatalf("the file's defaults are not in the dry run: image %s shm %s tolerations %v limits %v", c.Image, shm(j), j.Spec.Template.Spec.Tolerations, c.Resources.Limits)
	}
	// Flags win, and a repeated flag replaces the file's list.
	j = job(tao(t, env, "submit", "train", "-n", ns, "--image", "pytorch/pytorch:latest", "--shm-size", "8Gi",
		"--toleration", "team=a:NoSchedule", "--dry-run=client", "-o", "json", "--", "python", "train.py"))
	if img := j.Spec.Template.Spec.Containers[0].Image; img != "pytorch/pytorch:latest" || shm(j) != "8Gi" || tolerates(j, "dedicated") || !tolerates(j, "team") {
		t.Fatalf("flags did not win: image %s shm %s tolerations %v", img, shm(j), j.Spec.Template.Spec.Tolerations)
	}
	// A real submit gets the same Job.
	if r := tao(t, env, "submit", "real", "-n", ns, "--", "python", "train.py"); r.code != 0 {
		t.Fatalf("submit with defaults: %s", r)
	}
	got, err := client.BatchV1().Jobs(ns).Get(context.Background(), "real", metav1.GetOptions{})
	if err != nil || got.Spec.Template.Spec.Containers[0].Image != "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt" || !tolerates(*got, "dedicated") || shm(*got) != "32Gi" {
		t.Fatalf("created Job %v, %v", got, err)
	}
	// preflight judges the job submit would make: the file's --gpus and --toleration.
	defaultsCheck := func(r result) string {
		t.Helper()
		var checks []struct{ Name, Result, Message string }
		if err := json.Unmarshal([]byte(r.stdout), &checks); err != nil {
			t.Fatalf("preflight -o json: %v; %s", err, r)
		}
		for _, c := range checks {
			if c.Name == "defaults file" {
				return c.Result + " " + c.Message
			}
		}
		return ""
	}
	r := tao(t, env, "preflight", "-n", ns, "-o", "json")
	if got := defaultsCheck(r); r.code != 0 || !strings.HasPrefix(got, "PASS ") || !strings.Contains(got, "--toleration, --gpus") {
		t.Fatalf("preflight with the defaults file: exit %d, defaults check %q; want PASS naming --toleration, --gpus\n%s", r.code, got, r)
	}
	// A broken file is a usage error naming the file and line, and nothing is created.
	if err := os.WriteFile(path, []byte("apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  shm: 32Gi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	contains(t, tao(t, env, "submit", "broken", "-n", ns, "--", "true"), 2, path+`:4: submit: "shm" is not a flag a defaults file can set`)
	// preflight reports it as a failed check, not a usage error.
	r = tao(t, env, "preflight", "-n", ns, "-o", "json")
	if got := defaultsCheck(r); r.code != 11 || !strings.HasPrefix(got, "FAIL ") || !strings.Contains(got, path+":4") {
		t.Fatalf("preflight with a broken defaults file: exit %d, defaults check %q; want 11 and FAIL naming %s:4\n%s", r.code, got, path, r)
	}
	if _, err := client.BatchV1().Jobs(ns).Get(context.Background(), "broken", metav1.GetOptions{}); err == nil {
		t.Fatalf("a broken defaults file still created a Job")
	}
}
