//go:build e2e

package e2e

// The real-node tests run real containers: the local cluster's real kubelet node (containerd,
// runc, CNI bridge, CoreDNS, a device plugin with 8 nvidia.com/gpu and, under make e2e, a few
// nvidia.com/mig-1g.10gb), with the test trainer (test/trainer) as the workload.
// test/localcluster/README.md, "The real node", is the contract: the environment below, the
// node's label and taint, the images.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// The real node's label and taint: only pods that ask for it land there.
const (
	// realNodeKey is the key of both.
	realNodeKey        = "kubectl-tao.dev/real-node"
	realNodeSelector   = realNodeKey + "=true"
	realNodeToleration = realNodeKey + "=true:NoSchedule"
	// trainerPath is where the test image carries the trainer.
	trainerPath = "/bin/trainer"
)

// realNodeEnv is what `make e2e` exports about the real node.
type realNodeEnv struct {
	// Name is the node's name; IP is the gateway address of its bridge, where pods reach the host.
	Name, IP string
	// Image has bash, coreutils, getent and the trainer; ShOnlyImage has only /bin/sh;
	// StagerImage is the imported stager image, "" when there is none.
	Image, ShOnlyImage, StagerImage string
	// TorchImage has Debian's python3-torch and torchrun, "" when the host has no python3-torch
	// (TorchImageSkip says so).
	TorchImage, TorchImageSkip string
	// OpenMPIImage has Debian's OpenMPI, python3 and mpi4py, "" when the host lacks them
	// (OpenMPIImageSkip says so).
	OpenMPIImage, OpenMPIImageSkip string
	// MPICHImage has Debian's MPICH and python3, "" when the host lacks them (MPICHImageSkip
	// says so).
	MPICHImage, MPICHImageSkip string
	// OpenMPISSHImage is OpenMPIImage plus Debian's ssh and sshd, "" when the host lacks them
	// (OpenMPISSHImageSkip says so).
	OpenMPISSHImage, OpenMPISSHImageSkip string
	// MIGSlices is how many nvidia.com/mig-1g.10gb the node's GPU in MIG mode is cut into,
	// beside its whole GPUs; 0 when it has none.
	MIGSlices int
}

// realNode returns the real node, or skips the test with the launcher's reason when there is
// none, except under CI=true, where a real node that did not start is a failure.
func realNode(t *testing.T) realNodeEnv {
	t.Helper()
	n := realNodeEnv{
		Name: os.Getenv("TAO_REAL_NODE"), IP: os.Getenv("TAO_REAL_NODE_IP"), Image: os.Getenv("TAO_TEST_IMAGE"),
		ShOnlyImage: os.Getenv("TAO_SH_ONLY_IMAGE"), StagerImage: os.Getenv("TAO_STAGER_IMAGE"),
		TorchImage: os.Getenv("TAO_TORCH_IMAGE"), TorchImageSkip: os.Getenv("TAO_TORCH_IMAGE_SKIP"),
		OpenMPIImage: os.Getenv("TAO_OPENMPI_IMAGE"), OpenMPIImageSkip: os.Getenv("TAO_OPENMPI_IMAGE_SKIP"),
		MPICHImage: os.Getenv("TAO_MPICH_IMAGE"), MPICHImageSkip: os.Getenv("TAO_MPICH_IMAGE_SKIP"),
		OpenMPISSHImage: os.Getenv("TAO_OPENMPI_SSH_IMAGE"), OpenMPISSHImageSkip: os.Getenv("TAO_OPENMPI_SSH_IMAGE_SKIP"),
	}
	// Empty from a launcher older than the variable: a node of whole GPUs.
	n.MIGSlices, _ = strconv.Atoi(os.Getenv("TAO_REAL_NODE_MIG_SLICES"))
	if n.Name == "" {
		reason := noRealNodeReason()
		if os.Getenv("CI") == "true" {
			t.Fatalf("no real node under CI=true: %s", reason)
		}
		t.Skipf("no real node: %s", reason)
	}
	if n.Image == "" {
		t.Fatalf("TAO_REAL_NODE=%s but TAO_TEST_IMAGE is not set", n.Name)
	}
	// A taint an earlier test failed to take off would keep this test's pods Pending until its
	// timeout; say so now, once per test, instead of after minutes of waiting.
	node, err := client.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the real node %s: %v", n.Name, err)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key != realNodeKey && !strings.HasPrefix(taint.Key, "node.kubernetes.io/") {
			t.Fatalf("the real node %s carries taint %s, which its pods do not tolerate (left by an earlier test?)", n.Name, taint.ToString())
		}
	}
	return n
}

// noRealNodeReason is why the cluster has no real node: the launcher's reason, when it gave one.
func noRealNodeReason() string {
	if reason := os.Getenv("TAO_REAL_NODE_SKIP"); reason != "" {
		return reason
	}
	return "TAO_REAL_NODE is not set (`make e2e` starts the real node where the host allows it)"
}

// submitReal submits a job that runs on the real node: its selector and toleration, the test
// image, no GPUs unless flags ask (a later flag wins), then "--" and the command.
func submitReal(t *testing.T, n realNodeEnv, ns, name string, flags []string, command ...string) {
	t.Helper()
	submitRealEnv(t, nil, n, ns, name, flags, command...)
}

// submitRealEnv is submitReal with variables added to submit's environment.
func submitRealEnv(t *testing.T, env []string, n realNodeEnv, ns, name string, flags []string, command ...string) {
	t.Helper()
	r := tao(t, env, n.submitArgs(ns, name, flags, command...)...)
	if r.code != 0 {
		t.Fatalf("submit %s: %s", name, r)
	}
}

// submitArgs is submitReal's command line.
func (n realNodeEnv) submitArgs(ns, name string, flags []string, command ...string) []string {
	args := append([]string{"submit", name, "-n", ns, "--image", n.Image, "--gpus", "0",
		"--node-selector", realNodeSelector, "--toleration", realNodeToleration}, flags...)
	return append(append(args, "--"), command...)
}

// waitComplete waits for the Job to complete; a failed Job fails the test with its logs.
func waitComplete(t *testing.T, ns, name string) {
	t.Helper()
	err := pollErr(3*time.Minute, jobFinished(ns, name, batchv1.JobComplete))
	if err != nil {
		t.Fatalf("job %s did not complete: %v\nlogs:\n%s\ndiagnose:\n%s", name, err,
			tao(t, nil, "logs", name, "-n", ns), tao(t, nil, "diagnose", name, "-n", ns))
	}
}

// rankLogs splits `logs` output ("[rank R] LINE") into each rank's lines.
func rankLogs(t *testing.T, out string) map[int][]string {
	t.Helper()
	m := map[int][]string{}
	rx := regexp.MustCompile(`^\[rank (\d+)\] (.*)$`)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		sm := rx.FindStringSubmatch(l)
		if sm == nil {
			t.Fatalf("log line %q has no rank prefix", l)
		}
		r, _ := strconv.Atoi(sm[1])
		m[r] = append(m[r], sm[2])
	}
	return m
}

// jobLogs reads every rank's log of a job with `logs`.
func jobLogs(t *testing.T, ns, name string) map[int][]string {
	t.Helper()
	r := tao(t, nil, "logs", name, "-n", ns)
	if r.code != 0 {
		t.Fatalf("logs %s: %s", name, r)
	}
	return rankLogs(t, r.stdout)
}

// trainerJSON decodes the JSON of rank's "rank R KEYWORD {...}" line into v.
func trainerJSON(t *testing.T, lines []string, rank int, keyword string, v any) {
	t.Helper()
	prefix := fmt.Sprintf("rank %d %s ", rank, keyword)
	for _, l := range lines {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			if err := json.Unmarshal([]byte(s), v); err != nil {
				t.Fatalf("rank %d %s line %q: %v", rank, keyword, l, err)
			}
			return
		}
	}
	t.Fatalf("rank %d printed no %s line:\n%s", rank, keyword, strings.Join(lines, "\n"))
}

// hasLine reports whether rank printed exactly line (without its "rank R " prefix).
func hasLine(lines []string, rank int, line string) bool {
	want := fmt.Sprintf("rank %d %s", rank, line)
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// trainerInfo is the trainer's info line.
type trainerInfo struct {
	Rank              int      `json:"rank"`
	WorldSize         int      `json:"world_size"`
	NodeRank          string   `json:"node_rank"`
	CompletionIndex   string   `json:"job_completion_index"`
	MasterAddr        string   `json:"master_addr"`
	MasterPort        string   `json:"master_port"`
	Hostname          string   `json:"hostname"`
	IPs               []string `json:"ips"`
	NvidiaVisibleDevs *string  `json:"nvidia_visible_devices"`
	Shm               *struct {
		Tmpfs bool  `json:"tmpfs"`
		Bytes int64 `json:"bytes"`
	} `json:"shm"`
}

// trainerArgv is the trainer's argv line, decoded from hex: exactly the bytes it got.
type trainerArgv struct {
	Args, Env []string
}

func decodeArgv(t *testing.T, lines []string, rank int) trainerArgv {
	t.Helper()
	var raw struct {
		ArgsHex []string `json:"args_hex"`
		EnvHex  []string `json:"env_hex"`
	}
	trainerJSON(t, lines, rank, "argv", &raw)
	unhex := func(hs []string) []string {
		out := make([]string, len(hs))
		for i, h := range hs {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = string(b)
		}
		return out
	}
	return trainerArgv{Args: unhex(raw.ArgsHex), Env: unhex(raw.EnvHex)}
}

// afterDashes is what follows the first "--" in args: the trainer's positional arguments.
func afterDashes(args []string) []string {
	for i, a := range args {
		if a == "--" {
			return args[i+1:]
		}
	}
	return nil
}

// rankPodIPs maps each rank of a job to its pod's IP.
func rankPodIPs(t *testing.T, ns, name string) map[int]string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[int]string{}
	for _, p := range pods.Items {
		r, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
		if err != nil {
			t.Fatalf("pod %s has no completion index", p.Name)
		}
		ips[r] = p.Status.PodIP
	}
	return ips
}

// background is a kubectl-tao command left running while the test goes on.
type background struct {
	cmd         *exec.Cmd
	out, errOut testbuf.Buffer
	done        chan struct{}
	err         error
}

func taoBackground(t *testing.T, args ...string) *background {
	t.Helper()
	return taoBackgroundEnv(t, nil, args...)
}

// taoBackgroundEnv is taoBackground with variables added to the environment (a later one wins).
func taoBackgroundEnv(t *testing.T, env []string, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	b.cmd.Env = taoEnv(env)
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.errOut
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// waitOutput waits until stdout contains every fragment.
func (b *background) waitOutput(t *testing.T, timeout time.Duration, fragments ...string) {
	t.Helper()
	b.waitIn(t, &b.out, timeout, fragments...)
}

// waitStderr waits until stderr contains every fragment: a command's progress lines, which say
// what it has seen.
func (b *background) waitStderr(t *testing.T, timeout time.Duration, fragments ...string) {
	t.Helper()
	b.waitIn(t, &b.errOut, timeout, fragments...)
}

func (b *background) waitIn(t *testing.T, buf *testbuf.Buffer, timeout time.Duration, fragments ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := ""
		for _, f := range fragments {
			if !strings.Contains(buf.String(), f) {
				missing = f
				break
			}
		}
		if missing == "" {
			return
		}
		select {
		case <-b.done:
			t.Fatalf("%q exited (%v) before printing %q:\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, b.err, missing, b.out.String(), b.errOut.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q printed no %q within %s:\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, missing, timeout, b.out.String(), b.errOut.String())
		}
	}
}

// wait waits for the command to exit by itself and returns how it ended.
func (b *background) wait(t *testing.T, timeout time.Duration) result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		t.Fatalf("%q still running after %s:\nstdout:\n%s\nstderr:\n%s", b.cmd.Args, timeout, b.out.String(), b.errOut.String())
	}
	return result{code: b.cmd.ProcessState.ExitCode(), stdout: b.out.String(), stderr: b.errOut.String()}
}
