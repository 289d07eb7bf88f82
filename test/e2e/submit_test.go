//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// submitted decodes the v1 List that `submit -o json` prints.
type submitted struct {
	Kind  string `json:"kind"`
	Items []struct {
		Kind     string            `json:"kind"`
		Metadata metav1.ObjectMeta `json:"metadata"`
	} `json:"items"`
}

func decode(t *testing.T, r result) submitted {
	t.Helper()
	var s submitted
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("stdout is not the JSON List: %v\n%s", err, r)
	}
	return s
}

func jobFinished(ns, name string, want batchv1.JobConditionType) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range job.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				if c.Type != want {
					return false, &unexpected{c.Type, c.Message}
				}
				return true, nil
			}
		}
		return false, nil
	}
}

type unexpected struct {
	cond batchv1.JobConditionType
	msg  string
}

func (u *unexpected) Error() string { return "job ended " + string(u.cond) + ": " + u.msg }

func TestSubmitSingleNodeCompletes(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "one", "-n", ns, "--image", "busybox", "--gpus", "8",
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "-o", "json", "--", "echo hello")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("submit: %s", r)
	}
	list := decode(t, r)
	if list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Kind != "Job" || list.Items[0].Metadata.UID == "" {
		t.Fatalf("unexpected output: %+v", list)
	}
	poll(t, 60*time.Second, "job one to complete", jobFinished(ns, "one", batchv1.JobComplete))
	job, _ := client.BatchV1().Jobs(ns).Get(context.Background(), "one", metav1.GetOptions{})
	if job.UID != list.Items[0].Metadata.UID || *job.Spec.BackoffLimit != 0 || job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("job differs from the contract: uid %s, %+v", job.UID, job.Spec)
	}
}

func TestSubmitMultiNode(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "ddp", "-n", ns, "--image", "pytorch", "--gpus", "8", "--nodes", "2",
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "torchrun", "train.py")
	if r.code != 0 || r.stdout != "job.batch/ddp created\nservice/ddp created\n" || r.stderr != "" {
		t.Fatalf("submit: %s", r)
	}
	ctx := context.Background()
	job, err := client.BatchV1().Jobs(ns).Get(ctx, "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services(ns).Get(ctx, "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses || svc.Spec.Selector["job-name"] != "ddp" ||
		len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != job.UID {
		t.Fatalf("service: %+v", svc)
	}
	var pods []corev1.Pod
	poll(t, 60*time.Second, "two running ranks", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"job-name": "ddp"}.String()})
		if err != nil {
			return false, err
		}
		pods = list.Items
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2, nil
	})
	hosts := map[string]bool{}
	for _, p := range pods {
		hosts[p.Spec.Hostname+"."+p.Spec.Subdomain] = true
		if q := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 8 {
			t.Errorf("pod %s asks for %s GPUs", p.Name, q.String())
		}
	}
	if !hosts["ddp-0.ddp"] || !hosts["ddp-1.ddp"] {
		t.Fatalf("pod hostnames %v, want ddp-0.ddp and ddp-1.ddp", hosts)
	}
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Errorf("two 8-GPU ranks on one 8-GPU node %s: the scheduler saw no GPU limits", pods[0].Spec.NodeName)
	}
}

func TestSubmitMoreGPUsThanExistCreatesNothing(t *testing.T) {
	ns := namespace(t)
	for _, args := range [][]string{
		{"--gpus", "8", "--nodes", "5"}, // 40 GPUs on a 4 x 8 cluster
		{"--gpus", "16"},                // 16 GPUs exist in total, but not on one node
	} {
		r := tao(t, nil, append(append([]string{"submit", "big", "-n", ns, "--image", "img"}, args...), "--", "true")...)
		contains(t, r, 7, "nvidia.com/gpu")
		if r.stdout != "" {
			t.Fatalf("refused submit printed to stdout: %s", r)
		}
	}
	assertNoObjects(t, ns)
}

func TestSubmitServerDryRunCreatesNothing(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "dry", "-n", ns, "--image", "img", "--nodes", "2", "--dry-run=server", "-o", "json", "--", "true")
	if r.code != 0 {
		t.Fatalf("server dry run: %s", r)
	}
	if l := decode(t, r); len(l.Items) != 2 || l.Items[0].Metadata.UID == "" {
		t.Fatalf("want the server's view of the Job and Service, got %+v", l)
	}
	assertNoObjects(t, ns)
}

func TestSubmitRBACDeniedServiceLeavesNothing(t *testing.T) {
	ns := namespace(t)
	// The user may manage Jobs but not Services (nor list nodes: the capacity check is skipped).
	grantRole(t, ns, "jobs-only-user", manageJobs)
	r := tao(t, nil, "submit", "denied", "-n", ns, "--as", "jobs-only-user", "--image", "img", "--nodes", "2", "--", "true")
	contains(t, r, 6, "Warning: capacity check skipped", "creating service/denied", "forbidden")
	assertRolledBack(t, ns, "denied", r)
}

func TestSubmitExistingJobIsUntouched(t *testing.T) {
	ns := namespace(t)
	first := tao(t, nil, "submit", "same", "-n", ns, "--image", "img", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "-o", "jsonpath={.items[0].metadata.uid}", "--", "true")
	if first.code != 0 || first.stdout == "" {
		t.Fatalf("first submit: %s", first)
	}
	second := tao(t, nil, "submit", "same", "-n", ns, "--image", "other", "--", "true")
	contains(t, second, 4, `job.batch/same already exists in namespace "`+ns+`"`)
	job, err := client.BatchV1().Jobs(ns).Get(context.Background(), "same", metav1.GetOptions{})
	if err != nil || string(job.UID) != first.stdout || job.Spec.Template.Spec.Containers[0].Image != "img" {
		t.Fatalf("existing job changed: %v %+v", err, job)
	}
}

func TestSubmitBadInput(t *testing.T) {
	ns := namespace(t)
	contains(t, tao(t, nil, "submit", "x", "-n", "no-such-namespace", "--image", "img", "--", "true"), 3, `namespace "no-such-namespace" not found`)
	contains(t, tao(t, nil, "submit", "Bad_Name", "-n", ns, "--image", "img", "--", "true"), 2, `invalid job name "Bad_Name"`)
	contains(t, tao(t, nil, "submit", "x", "-n", ns, "--gpus", "-1", "--image", "img", "--", "true"), 2, "invalid --gpus -1")
	home := t.TempDir()
	noConfig := tao(t, []string{"KUBECONFIG=", "HOME=" + home}, "submit", "x", "--image", "img", "--", "true")
	contains(t, noConfig, 5, "Could not authenticate to a Kubernetes cluster", "kubectl get nodes")
	unreachable := filepath.Join(home, "config")
	cfg := "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
	if err := os.WriteFile(unreachable, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	contains(t, tao(t, []string{"KUBECONFIG=" + unreachable}, "submit", "x", "--image", "img", "--", "true"), 5, "Could not reach the Kubernetes API server at https://127.0.0.1:1")
	assertNoObjects(t, ns)
}

func TestEnvironmentNamespace(t *testing.T) {
	ns := namespace(t)
	r := tao(t, []string{"TAO_K8S_NAMESPACE=" + ns}, "submit", "env-ns", "--image", "img", "--gpus", "0", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	if _, err := client.BatchV1().Jobs(ns).Get(context.Background(), "env-ns", metav1.GetOptions{}); err != nil {
		t.Fatalf("TAO_K8S_NAMESPACE was not used: %v", err)
	}
}

func TestThroughKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on PATH: the plugin must be proven through the real kubectl")
	}
	dir := filepath.Dir(binary)
	cmd := exec.Command(kubectl, "tao", "version", "-o", "json")
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl tao version: %v\n%s", err, out)
	}
	var v struct{ Version, Commit string }
	if err := json.Unmarshal(out, &v); err != nil || !strings.HasPrefix(v.Version, "v") || v.Commit == "" {
		t.Fatalf("kubectl tao version -o json = %s (%v)", out, err)
	}
	direct := tao(t, nil, "version", "-o", "json")
	if direct.stdout != string(out) {
		t.Fatalf("kubectl tao and kubectl-tao disagree:\n%s\n%s", out, direct.stdout)
	}
}

func assertNoObjects(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(jobs.Items) + len(svcs.Items) + len(pods.Items); n != 0 {
		t.Fatalf("%d objects left in %s: jobs %v, services %v, pods %d", n, ns, jobs.Items, svcs.Items, len(pods.Items))
	}
}
