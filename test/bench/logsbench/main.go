// Command logsbench measures `kubectl-tao logs` against `kubectl logs -l` on the local cluster:
// a 64-rank job with 2,000 lines per rank, median wall time and peak memory of several runs of
// each, side by side, and how soon `logs -f` shows every rank's first line. `make bench` runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	ranks := flag.Int("ranks", 64, "pods of the job")
	lines := flag.Int("lines", 2000, "log lines per pod")
	runs := flag.Int("runs", 5, "runs of each command; the median is reported")
	tao := flag.String("tao", "bin/kubectl-tao", "the kubectl-tao binary")
	kubectl := flag.String("kubectl", "kubectl", "the kubectl binary")
	flag.Parse()
	if err := run(*ranks, *lines, *runs, *tao, *kubectl); err != nil {
		fmt.Fprintln(os.Stderr, "logsbench:", err)
		os.Exit(1)
	}
}

type sample struct {
	wall  time.Duration
	maxKB int64
	lines int
}

func measure(name string, args ...string) (sample, error) {
	cmd := exec.Command(name, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(start), lines: bytes.Count(out.Bytes(), []byte{'\n'})}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.maxKB = ru.Maxrss
	}
	if err != nil {
		return s, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, errOut.String())
	}
	return s, nil
}

func median(xs []sample) sample {
	sort.Slice(xs, func(i, j int) bool { return xs[i].wall < xs[j].wall })
	m := xs[len(xs)/2]
	for _, x := range xs {
		m.maxKB = max(m.maxKB, x.maxKB)
	}
	return m
}

func run(ranks, lines, runs int, tao, kubectl string) error {
	kubeconfig := os.Getenv("KUBECONFIG")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	ns := "bench-" + rand.String(5)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		if err := client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "logsbench: deleting namespace %s: %v\n", ns, err)
		}
	}()
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	const job = "bench"
	if _, err := measure(tao, "submit", job, "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", fmt.Sprint(ranks),
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--annotation", fmt.Sprintf("sim.kubectl-tao.dev/log-lines=%d", lines), "--", "train"); err != nil {
		return err
	}
	want := ranks * lines
	fmt.Fprintf(os.Stderr, "waiting for %d pods x %d lines...\n", ranks, lines)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := measure(tao, "logs", job, "-n", ns, "--tail", "1")
		if err == nil && s.lines == ranks {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the job's %d pods did not all start: %v", ranks, err)
		}
		time.Sleep(time.Second)
	}

	var ktl, ours []sample
	for i := 0; i < runs; i++ {
		s, err := measure(kubectl, "logs", "-l", "job-name="+job, "-n", ns, "--prefix", "--tail=-1", fmt.Sprintf("--max-log-requests=%d", ranks+1))
		if err != nil {
			return err
		}
		if s.lines != want {
			return fmt.Errorf("kubectl printed %d lines, want %d", s.lines, want)
		}
		ktl = append(ktl, s)
		s, err = measure(tao, "logs", job, "-n", ns)
		if err != nil {
			return err
		}
		if s.lines != want {
			return fmt.Errorf("kubectl-tao printed %d lines, want %d", s.lines, want)
		}
		ours = append(ours, s)
	}
	k, o := median(ktl), median(ours)

	first, err := followFirstLines(tao, ns, job, ranks)
	if err != nil {
		return err
	}
	fmt.Printf("logs of a %d-pod job, %d lines per pod (%d lines), median of %d runs\n", ranks, lines, want, runs)
	fmt.Printf("%-58s %10s %12s\n", "command", "time", "peak RSS")
	fmt.Printf("%-58s %10s %9.1f MB\n", "kubectl logs -l job-name=J --prefix --tail=-1", k.wall.Round(time.Millisecond), float64(k.maxKB)/1024)
	fmt.Printf("%-58s %10s %9.1f MB\n", "kubectl-tao logs J", o.wall.Round(time.Millisecond), float64(o.maxKB)/1024)
	fmt.Printf("ratio kubectl-tao / kubectl: %.3fx (goal <= 0.05x)\n", float64(o.wall)/float64(k.wall))
	fmt.Printf("kubectl-tao logs -f J: every rank's first line after %s (goal <= 1s)\n", first.Round(time.Millisecond))
	return nil
}

// followFirstLines starts `logs -f` and returns how long until every rank has printed a line.
func followFirstLines(tao, ns, job string, ranks int) (time.Duration, error) {
	cmd := exec.Command(tao, "logs", "-f", job, "-n", ns)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	seen := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p, _, ok := strings.Cut(sc.Text(), "]"); ok && !seen[p] {
			seen[p] = true
			if len(seen) == ranks {
				return time.Since(start), nil
			}
		}
	}
	return 0, fmt.Errorf("logs -f ended after %d of %d ranks", len(seen), ranks)
}
