// Command capacitybench measures `kubectl-tao capacity` against what a user would run with
// kubectl for the same answer, `kubectl get nodes -o json` plus `kubectl get pods -A -o json`,
// on a large local cluster: by default 5,000 nodes (the cluster must already have them) and
// 2,000 running 8-GPU pods, which it creates. Median wall and CPU time, peak memory, ratio,
// and API requests. `make bench-capacity` (part of `make bench`) runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-tao/kubectl-tao/test/bench/benchutil"
)

func main() {
	nodes := flag.Int("nodes", 5000, "nodes the cluster must have (bin/localcluster up --nodes N)")
	pods := flag.Int("pods", 2000, "running GPU pods to create")
	gpus := flag.Int("gpus", 8, "GPUs per pod")
	tools := benchutil.ToolFlags(5, "runs of each command")
	benchutil.Main(func() error { return run(*nodes, *pods, *gpus, tools.Runs, tools.Tao, tools.Kubectl) })
}

func run(nodes, pods, gpus, runs int, tao, kubectl string) error {
	cfg, err := benchutil.Config()
	if err != nil {
		return err
	}
	// Creating 2,000 pods is a fan-out: client-go's default 5 QPS would take minutes.
	fast := rest.CopyConfig(cfg)
	fast.QPS, fast.Burst = 500, 500
	fast.ContentType = "application/vnd.kubernetes.protobuf"
	client := kubernetes.NewForConfigOrDie(fast)
	ctx := context.Background()

	have, err := countNodes(ctx, client)
	if err != nil {
		return err
	}
	if have < nodes {
		return fmt.Errorf("the cluster has %d nodes, want %d: bin/localcluster up --nodes %d", have, nodes, nodes)
	}
	ns, deleteNS, err := benchutil.Namespace(ctx, client, "capbench")
	if err != nil {
		return err
	}
	defer deleteNS()
	start := time.Now()
	if err := createPods(ctx, client, ns, pods, gpus); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "created %d pods in %s; waiting for them to run...\n", pods, time.Since(start).Round(time.Millisecond))
	if err := waitRunning(ctx, client, ns, pods); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d pods running after %s\n", pods, time.Since(start).Round(time.Millisecond))

	loadBefore := benchutil.LoadAverage()
	var getNodes, getPods, ours []benchutil.Sample
	var sums []benchutil.Sample
	for i := 0; i < runs; i++ {
		n, err := benchutil.Measure(nil, kubectl, "get", "nodes", "-o", "json")
		if err != nil {
			return err
		}
		p, err := benchutil.Measure(nil, kubectl, "get", "pods", "-A", "-o", "json")
		if err != nil {
			return err
		}
		getNodes, getPods = append(getNodes, n), append(getPods, p)
		sums = append(sums, benchutil.Sample{Wall: n.Wall + p.Wall, CPU: n.CPU + p.CPU, MaxKB: max(n.MaxKB, p.MaxKB)})
		o, err := benchutil.Measure(nil, tao, "capacity", "-o", "json")
		if err != nil {
			return err
		}
		if err := check(o.Out, nodes, pods*gpus); err != nil {
			return err
		}
		ours = append(ours, o)
	}
	loadAfter := benchutil.LoadAverage()
	kn, kp, ks, o := benchutil.Median(getNodes), benchutil.Median(getPods), benchutil.Median(sums), benchutil.Median(ours)

	counter, err := benchutil.NewCounter(cfg, ns)
	if err != nil {
		return err
	}
	defer counter.Close()
	env := []string{"KUBECONFIG=" + counter.Kubeconfig}
	if _, err := benchutil.Measure(env, tao, "capacity"); err != nil {
		return err
	}
	ourCounts := benchutil.FormatCounts(counter.Take())
	for _, args := range [][]string{{"get", "nodes", "-o", "json"}, {"get", "pods", "-A", "-o", "json"}} {
		if _, err := benchutil.Measure(env, kubectl, args...); err != nil {
			return err
		}
	}
	theirCounts := benchutil.FormatCounts(counter.Take())

	benchutil.PrintSetting(loadBefore, loadAfter)
	fmt.Printf("capacity of %d nodes with %d running %d-GPU pods, median of %d runs\n", nodes, pods, gpus, runs)
	benchutil.Header()
	benchutil.Row("kubectl get nodes -o json", kn)
	benchutil.Row("kubectl get pods -A -o json", kp)
	benchutil.Row("the two kubectl commands (sum of times, higher peak)", ks)
	benchutil.Row("kubectl-tao capacity -o json", o)
	fmt.Printf("  ratio kubectl-tao / kubectl: %.3fx (goal <= 0.2x); peak %.1f MB (goal <= 64 MB)\n\n", float64(o.Wall)/float64(ks.Wall), o.MB())
	fmt.Println("API requests")
	fmt.Printf("  %-46s %s\n", "kubectl-tao capacity", ourCounts)
	fmt.Printf("  %-46s %s\n", "kubectl get nodes + get pods -A", theirCounts)
	return nil
}

func countNodes(ctx context.Context, client kubernetes.Interface) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return 0, err
		}
		n += len(l.Items)
		if opts.Continue = l.Continue; opts.Continue == "" {
			return n, nil
		}
	}
}

// createPods creates bare pods that KWOK keeps running, concurrently.
func createPods(ctx context.Context, client kubernetes.Interface, ns string, n, gpus int) error {
	gpu := resource.MustParse(fmt.Sprint(gpus))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gpu-%04d", i), Namespace: ns,
						Annotations: map[string]string{"sim.kubectl-tao.dev/fate": "run-forever", "sim.kubectl-tao.dev/log-lines": "1"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "busybox",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": gpu}}}}},
				}
				if err := createRetrying(ctx, client, pod); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// createRetrying creates pod, retrying what a busy API server answers (timeouts, 429).
func createRetrying(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) error {
	for attempt := 0; ; attempt++ {
		_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err) && attempt > 0:
			return nil
		case attempt < 10 && (apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)):
			time.Sleep(time.Second)
		default:
			return err
		}
	}
}

func waitRunning(ctx context.Context, client kubernetes.Interface, ns string, n int) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		running := 0
		opts := metav1.ListOptions{Limit: 500, FieldSelector: "status.phase=Running"}
		for {
			l, err := client.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return err
			}
			running += len(l.Items)
			if opts.Continue = l.Continue; opts.Continue == "" {
				break
			}
		}
		if running >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d pods running after 10 minutes", running, n)
		}
		fmt.Fprintf(os.Stderr, "  %d/%d running\n", running, n)
		time.Sleep(5 * time.Second)
	}
}

// check makes sure capacity saw every node and every requested GPU.
func check(out []byte, nodes, requested int) error {
	var rep struct {
		Nodes []json.RawMessage `json:"nodes"`
		Total struct {
			Requested int `json:"requested"`
		} `json:"total"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return fmt.Errorf("capacity -o json: %w", err)
	}
	if len(rep.Nodes) < nodes || rep.Total.Requested < requested {
		return fmt.Errorf("capacity saw %d nodes and %d requested GPUs, want %d and at least %d", len(rep.Nodes), rep.Total.Requested, nodes, requested)
	}
	return nil
}
