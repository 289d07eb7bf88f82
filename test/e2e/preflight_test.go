//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

type check struct{ Name, Result, Message, Fix string }

func preflightJSON(t *testing.T, args ...string) (map[string]check, result) {
	t.Helper()
	return preflightJSONWith(t, nil, args...)
}

// preflightJSONWith is preflightJSON with env added to the command's environment.
func preflightJSONWith(t *testing.T, env []string, args ...string) (map[string]check, result) {
	t.Helper()
	r := tao(t, env, append([]string{"preflight", "-o", "json"}, args...)...)
	var list []check
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("preflight -o json: %v\n%s", err, r)
	}
	m := map[string]check{}
	for _, c := range list {
		m[c.Name] = c
	}
	return m, r
}

func TestPreflightFittingRequestHasNoFailure(t *testing.T) {
	ns := namespace(t)
	checks, r := preflightJSON(t, "-n", ns, "--gpus", "8", "--nodes", "2")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %s", r)
	}
	for _, c := range checks {
		if c.Result == "FAIL" {
			t.Errorf("%s FAILed: %s", c.Name, c.Message)
		}
	}
	// The local cluster has no GPU Operator DaemonSet, and dcgm-exporter (a stand-in) runs on the
	// real node at most, never on the simulated ones: the two expected WARNs.
	for name, want := range map[string]string{"cluster": "PASS", "namespace": "PASS", "permissions": "PASS", "gpus": "PASS",
		"gpu-operator": "WARN", "gpu-metrics": "WARN", "node-runtime": "PASS", "container-toolkit": "INFO", "multi-node": "PASS", "fit": "PASS"} {
		if checks[name].Result != want {
			t.Errorf("%s = %+v, want %s", name, checks[name], want)
		}
	}
}

func TestPreflightRequestThatDoesNotFit(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "preflight", "-n", ns, "--gpus", "8", "--nodes", "5")
	contains(t, r, 11, "fit ", "FAIL", "needs 40 nvidia.com/gpu (8 per node x 5 nodes) but only 32 are allocatable", "error: preflight failed: fit")
	r = tao(t, nil, "preflight", "-n", ns, "--gpus", "16")
	contains(t, r, 11, "a rank cannot span nodes", "at most 8 on one node")
}

func TestPreflightNamesRBACDenial(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "preflight", "-n", ns, "--as", "nobody")
	contains(t, r, 11, "permissions", "you may not: create jobs.batch (submit)", "get pods/log (logs, top", "kubectl tao rbac -n "+ns, "list nodes")
}

func TestPreflightWarnsOnNodesWithoutGFDLabels(t *testing.T) {
	ctx := context.Background()
	const name = "gpu-node-3"
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]any{}
	removed := map[string]any{}
	for k, v := range n.Labels {
		if strings.HasPrefix(k, "nvidia.com/cuda.") {
			saved[k], removed[k] = v, nil
		}
	}
	patch := func(labels map[string]any) {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch(removed)
	t.Cleanup(func() { patch(saved) })
	checks, r := preflightJSON(t, "--gpus", "1")
	c := checks["node-runtime"]
	nodes, _ := gpuNodes(t)
	if r.code != 0 || c.Result != "WARN" || !strings.Contains(c.Message, fmt.Sprintf("1 of %d GPU nodes carry no GPU Feature Discovery", nodes)) || !strings.Contains(c.Message, name) {
		t.Fatalf("node-runtime %+v\n%s", c, r)
	}
	// Managed GPU nodes: the SDK's TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1 skips the check, and says so.
	checks, r = preflightJSONWith(t, []string{"TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1"}, "--gpus", "1")
	if c := checks["node-runtime"]; r.code != 0 || c.Result != "INFO" || !strings.Contains(c.Message, "skipped: TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1") {
		t.Fatalf("node-runtime with the skip %+v\n%s", c, r)
	}
}

type capacityReport struct {
	Nodes []struct {
		Name                         string
		Allocatable, Requested, Free int64
	}
	Total struct{ Allocatable, Requested, Free int64 }
}

func capacityNow(t *testing.T) capacityReport {
	t.Helper()
	r := tao(t, nil, "capacity", "-o", "json")
	var rep capacityReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("capacity -o json: %s", r)
	}
	return rep
}

// gpuNodes counts the cluster's nodes that offer GPUs, and their GPUs: the KWOK nodes, and the
// real node when the launcher started one.
func gpuNodes(t *testing.T) (nodes int, gpus int64) {
	t.Helper()
	list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		if q, ok := n.Status.Allocatable[jobspec.GPUResource]; ok && q.Value() > 0 {
			nodes++
			gpus += q.Value()
		}
	}
	return nodes, gpus
}

func TestCapacityShowsARunningJob(t *testing.T) {
	ns := namespace(t)
	before := capacityNow(t)
	if nodes, gpus := gpuNodes(t); before.Total.Allocatable != gpus || len(before.Nodes) != nodes {
		t.Fatalf("before: %+v, want %d nodes with %d GPUs", before, nodes, gpus)
	}
	r := tao(t, nil, "submit", "hold", "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", "2",
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "sleep", "infinity")
	contains(t, r, 0)
	var after capacityReport
	poll(t, 60*time.Second, "capacity to count the job's 16 GPUs", func(context.Context) (bool, error) {
		after = capacityNow(t)
		return after.Total.Requested >= before.Total.Requested+16, nil
	})
	if after.Total.Free != after.Total.Allocatable-after.Total.Requested {
		t.Fatalf("totals do not add up: %+v", after.Total)
	}
	table := tao(t, nil, "capacity")
	contains(t, table, 0, "NAME", "PRODUCT", "ALLOCATABLE", "REQUESTED", "FREE", "NVIDIA-H100-80GB-HBM3", "TOTAL")
	// And preflight now sees that two more full nodes fit, but not three.
	checks, _ := preflightJSON(t, "-n", ns, "--gpus", "8", "--nodes", "3")
	if c := checks["fit"]; c.Result != "WARN" || !strings.Contains(c.Message, "fits when others finish") {
		t.Fatalf("fit %+v", c)
	}
	r = tao(t, nil, "preflight", "-n", ns, "--gpus", "8", "--nodes", "3", "--now")
	contains(t, r, 11, "does not fit now (--now)")
}

func TestCreatePullSecretFromStdinKeepsKeyHidden(t *testing.T) {
	ns := namespace(t)
	key := "nvapi-" + rand.String(24)
	cmd := exec.Command(binary, "create-pull-secret", "ngc", "-n", ns, "--from-stdin")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The process is blocked reading stdin: what the process table shows of it now is all it will show.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if _, err := io.WriteString(stdin, key+"\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("create-pull-secret: %v\n%s%s", err, out.String(), errOut.String())
	}
	for what, s := range map[string]string{"cmdline": string(cmdline), "environ": string(environ), "stdout": out.String(), "stderr": errOut.String()} {
		if strings.Contains(s, key) {
			t.Fatalf("the key is in %s: %q", what, s)
		}
	}
	if out.String() != "secret/ngc created\n" {
		t.Fatalf("stdout %q", out.String())
	}
	s, err := client.CoreV1().Secrets(ns).Get(context.Background(), "ngc", metav1.GetOptions{})
	if err != nil || s.Type != corev1.SecretTypeDockerConfigJson || !strings.Contains(string(s.Data[corev1.DockerConfigJsonKey]), key) {
		t.Fatalf("secret %v %v", s, err)
	}
	// Again: refused, untouched; preflight finds it.
	r := tao(t, []string{"NGC_KEY=" + key}, "create-pull-secret", "ngc", "-n", ns)
	contains(t, r, 4, "already exists", "--overwrite")
	checks, _ := preflightJSON(t, "-n", ns, "--image-pull-secret", "ngc")
	if checks["pull-secret"].Result != "PASS" {
		t.Fatalf("pull-secret %+v", checks["pull-secret"])
	}
	checks, _ = preflightJSON(t, "-n", ns, "--image-pull-secret", "missing")
	if checks["pull-secret"].Result != "FAIL" {
		t.Fatalf("pull-secret %+v", checks["pull-secret"])
	}
}

// A user bound only to what `kubectl tao rbac` prints runs the whole flow.
func TestLeastPrivilegeUserRunsTheFlow(t *testing.T) {
	ns := namespace(t)
	user := leastPrivilegeUser(t, ns, "tao-e2e-")
	as := []string{"-n", ns, "--as", user}
	checks, r := preflightJSON(t, append(as, "--gpus", "8", "--nodes", "2")...)
	if r.code != 0 || checks["permissions"].Result != "PASS" || checks["cluster-reads"].Result != "PASS" || checks["fit"].Result != "PASS" {
		t.Fatalf("preflight as %s: %+v\n%s", user, checks, r)
	}
	contains(t, tao(t, nil, append(as, "submit", "ok", "--image", "busybox", "--gpus", "8", "--nodes", "2", "--wait",
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "true")...), 0)
	contains(t, tao(t, nil, append(as, "status", "ok")...), 0, "Complete")
	contains(t, tao(t, nil, append(as, "logs", "ok")...), 0, "rank 0 step 1", "rank 1 step 1")
	contains(t, tao(t, nil, append(as, "diagnose", "ok")...), 0)
	contains(t, tao(t, nil, append(as, "submit", "long", "--image", "busybox", "--gpus", "1",
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "sleep", "infinity")...), 0)
	poll(t, 60*time.Second, "the long job to run", statusIs(t, ns, "long", "Running"))
	contains(t, tao(t, nil, append(as, "cancel", "long")...), 0)
	contains(t, tao(t, nil, append(as, "capacity")...), 0, "TOTAL")
}

// A defaults file is read the same way by submit and preflight: a memory no node of the local
// cluster holds makes submit refuse the job (NoCapacity) and preflight FAIL its fit, both naming
// memory. preflight once dropped the keys it had no flag for and said fit PASS.
func TestPreflightDefaultsFileFailsLikeSubmit(t *testing.T) {
	ns := namespace(t)
	env, _ := defaultsFile(t, "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: busybox\n  memory: 2Ti\n")

	r := tao(t, env, "submit", "too-big", "-n", ns, "--", "true")
	contains(t, r, 7, "memory", "--memory")
	if _, err := client.BatchV1().Jobs(ns).Get(context.Background(), "too-big", metav1.GetOptions{}); err == nil {
		t.Fatal("submit refused the job but created it")
	}

	checks, r := preflightJSONWith(t, env, "-n", ns)
	if fit := checks["fit"]; r.code != 11 || fit.Result != "FAIL" || !strings.Contains(fit.Message, "memory") {
		t.Fatalf("want exit 11 and fit FAIL naming memory, got fit %+v\n%s", fit, r)
	}
	if d := checks["defaults file"]; d.Result != "PASS" || !strings.Contains(d.Message, "--memory") {
		t.Errorf("defaults file %+v, want PASS naming --memory", d)
	}
	// The same job without the file's memory fits, so the FAIL above is the memory's.
	if r := tao(t, env, "preflight", "-n", ns, "--memory", "1Gi"); r.code != 0 {
		t.Errorf("with --memory 1Gi: %s", r)
	}
}
