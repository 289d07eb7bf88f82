package benchutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// FetchAll is the floor of a `logs` benchmark: this process, already started, reads every pod
// of the job's whole log at once with a typed client and discards it. It returns how long that
// took: what the server takes, with no start-up and no printing.
func FetchAll(ctx context.Context, cfg *rest.Config, ns, job string) (time.Duration, error) {
	return eachLog(ctx, cfg, ns, job, &corev1.PodLogOptions{}, func(rc io.Reader) error {
		_, err := io.Copy(io.Discard, rc)
		return err
	})
}

// FollowFloor is the floor of a `logs -f` benchmark: this process, already started, lists the
// job's pods and follows every one's log at once with a typed client, and returns how long it
// took until each stream had given its first line: what the server and its kubelets take to
// start that many followed streams, with no start-up, ordering or printing.
func FollowFloor(ctx context.Context, cfg *rest.Config, ns, job string) (time.Duration, error) {
	return eachLog(ctx, cfg, ns, job, &corev1.PodLogOptions{Follow: true}, func(rc io.Reader) error {
		_, err := bufio.NewReader(rc).ReadString('\n')
		return err
	})
}

// eachLog builds a client, lists the job's pods and opens every pod's log at once with opts,
// handing each to read; it returns how long all that took, the client's creation included.
func eachLog(ctx context.Context, cfg *rest.Config, ns, job string, opts *corev1.PodLogOptions, read func(io.Reader) error) (time.Duration, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 2000, 2000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	// Followed streams never end by themselves: they are cut when this returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		return 0, err
	}
	errs := make(chan error, len(pods.Items))
	for _, p := range pods.Items {
		go func() {
			rc, err := client.CoreV1().Pods(ns).GetLogs(p.Name, opts).Stream(ctx)
			if err == nil {
				if err = read(rc); err != nil {
					err = fmt.Errorf("log of %s: %w", p.Name, err)
				}
				rc.Close()
			}
			errs <- err
		}()
	}
	for range pods.Items {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// FollowFirstLines starts `tao logs -f job` and returns how long it took until every one of
// ranks ranks had printed a line, and the process's peak resident memory in KB at that moment
// (VmHWM; the process is then stopped).
func FollowFirstLines(env []string, tao, ns, job string, ranks int) (time.Duration, int64, error) {
	cmd := exec.Command(tao, "logs", "-f", job, "-n", ns)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	seen := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p, _, ok := strings.Cut(sc.Text(), "]"); ok && !seen[p] {
			seen[p] = true
			if len(seen) == ranks {
				return time.Since(start), peakKB(cmd.Process.Pid), nil
			}
		}
	}
	return 0, 0, fmt.Errorf("logs -f ended after %d of %d ranks", len(seen), ranks)
}

// peakKB is a running process's peak resident set size (VmHWM in /proc), 0 when unknown.
func peakKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}
