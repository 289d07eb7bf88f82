// Command scalebench measures kubectl-tao against kubectl on a 1,000-rank job (pods without
// GPUs) on the local cluster, side by side in one run: `logs` (1,000 ranks x 100 lines)
// against `kubectl logs -l --prefix --max-log-requests=1000`, how soon `logs -f` shows every
// rank's first line and its peak memory, `top` against `logs --tail 1` (top reads each rank's
// last line too, and its findings need every rank), and `cancel` against `kubectl delete job
// --cascade=foreground --wait`, with the API requests each sends. `make bench-scale` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/kubectl-tao/kubectl-tao/test/bench/benchutil"
)

func main() {
	ranks := flag.Int("ranks", 1000, "pods of the job")
	lines := flag.Int("lines", 100, "log lines per pod")
	tools := benchutil.ToolFlags(3, "runs of each logs command")
	followRuns := flag.Int("follow-runs", 3, "runs of logs -f; the median is reported")
	cancelRuns := flag.Int("cancel-runs", 2, "runs of each cancel command (each on a new job); the median is reported")
	benchutil.Main(func() error {
		// kwok serves each followed log with an inotify instance of its own; past the host's
		// per-user limit it writes "too many open files" into the streams instead of the log.
		if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances"); err == nil {
			var n int
			if _, err := fmt.Sscan(string(b), &n); err == nil && n < *ranks+200 {
				return fmt.Errorf("fs.inotify.max_user_instances is %d: kwok needs one per followed rank; raise it (sysctl -w fs.inotify.max_user_instances=%d)", n, 2**ranks)
			}
		}
		return run(*ranks, *lines, tools.Runs, *followRuns, *cancelRuns, tools.Tao, tools.Kubectl)
	})
}

type bench struct {
	client       kubernetes.Interface
	ns           string
	ranks, lines int
	tao          string
}

// submit creates a job of b.ranks ranks that print b.lines lines and run until deleted, and
// waits until every pod runs and has printed its lines.
func (b *bench) submit(ctx context.Context, job string) error {
	if _, err := benchutil.Measure(nil, b.tao, "submit", job, "-n", b.ns, "--image", "busybox", "--gpus", "0", "--nodes", fmt.Sprint(b.ranks),
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--annotation", fmt.Sprintf("sim.kubectl-tao.dev/log-lines=%d", b.lines), "--", "train"); err != nil {
		return err
	}
	begin := time.Now()
	deadline := begin.Add(15 * time.Minute)
	for {
		running := 0
		err := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return b.client.CoreV1().Pods(b.ns).List(ctx, opts)
		}).EachListItem(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job, Limit: 500}, func(o runtime.Object) error {
			if o.(*corev1.Pod).Status.Phase == corev1.PodRunning {
				running++
			}
			return nil
		})
		if err == nil && running == b.ranks {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of the job's %d pods run after 15m (%v)", running, b.ranks, err)
		}
		time.Sleep(2 * time.Second)
	}
	fmt.Fprintf(os.Stderr, "%s: %d pods running after %s\n", job, b.ranks, time.Since(begin).Round(time.Second))
	// The simulated logs are written as the pods start; a `--tail 1` read that sees every
	// rank says they are all there.
	for {
		s, err := benchutil.Measure(nil, b.tao, "logs", job, "-n", b.ns, "--tail", "1")
		if err == nil && s.Lines == b.ranks {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every rank of %s has a log line: %v", job, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func run(ranks, lines, runs, followRuns, cancelRuns int, tao, kubectl string) error {
	cfg, err := benchutil.Config()
	if err != nil {
		return err
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	ns, deleteNS, err := benchutil.Namespace(ctx, client, "scale")
	if err != nil {
		return err
	}
	defer deleteNS()
	b := &bench{client: client, ns: ns, ranks: ranks, lines: lines, tao: tao}
	const job = "scale"
	if err := b.submit(ctx, job); err != nil {
		return err
	}
	loadBefore := benchutil.LoadAverage()
	want := ranks * lines

	// logs, no follow, alternating.
	kubectlLogs := []string{"logs", "-l", "job-name=" + job, "-n", ns, "--prefix", "--tail=-1", fmt.Sprintf("--max-log-requests=%d", ranks)}
	taoLogs := []string{"logs", job, "-n", ns}
	var ktl, ours, floors []benchutil.Sample
	for i := 0; i < runs; i++ {
		for _, c := range []struct {
			bin  string
			args []string
			into *[]benchutil.Sample
		}{{kubectl, kubectlLogs, &ktl}, {tao, taoLogs, &ours}} {
			s, err := benchutil.Measure(nil, c.bin, c.args...)
			if err != nil {
				return err
			}
			if s.Lines != want {
				return fmt.Errorf("%s printed %d lines, want %d", c.bin, s.Lines, want)
			}
			*c.into = append(*c.into, s)
		}
		d, err := benchutil.FetchAll(ctx, cfg, ns, job)
		if err != nil {
			return err
		}
		floors = append(floors, benchutil.Sample{Wall: d})
	}
	kLogs, oLogs, floor := benchutil.Median(ktl), benchutil.Median(ours), benchutil.Median(floors)

	// top against logs --tail 1, alternating. The pods ask for no GPU, as on KWOK nodes no
	// exporter or nvidia-smi answers: this is top's log part, which grows with the ranks (its
	// GPU part is one request per node).
	taoTop := []string{"top", job, "-n", ns}
	taoTail := []string{"logs", job, "-n", ns, "--tail", "1"}
	var tops, tails []benchutil.Sample
	for i := 0; i < runs; i++ {
		for _, c := range []struct {
			args []string
			into *[]benchutil.Sample
		}{{taoTail, &tails}, {taoTop, &tops}} {
			s, err := benchutil.Measure(nil, tao, c.args...)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, s)
		}
	}
	oTop, oTail := benchutil.Median(tops), benchutil.Median(tails)

	// logs -f: every rank's first line, and the memory it takes to follow them all.
	// Alternating with the floor: this process following every log at once.
	var firsts, followFloors []benchutil.Sample
	for i := 0; i < followRuns; i++ {
		d, kb, err := benchutil.FollowFirstLines(nil, tao, ns, job, ranks)
		if err != nil {
			return err
		}
		firsts = append(firsts, benchutil.Sample{Wall: d, MaxKB: kb})
		if d, err = benchutil.FollowFloor(ctx, cfg, ns, job); err != nil {
			return err
		}
		followFloors = append(followFloors, benchutil.Sample{Wall: d})
	}
	first, followFloor := benchutil.Median(firsts), benchutil.Median(followFloors)

	// API requests of logs and logs -f (not timed).
	counter, err := benchutil.NewCounter(cfg, ns)
	if err != nil {
		return err
	}
	defer counter.Close()
	env := []string{"KUBECONFIG=" + counter.Kubeconfig}
	counts := map[string]string{}
	for _, c := range []struct {
		name, bin string
		args      []string
	}{{"kubectl logs -l", kubectl, kubectlLogs}, {"kubectl-tao logs", tao, taoLogs}} {
		if _, err := benchutil.Measure(env, c.bin, c.args...); err != nil {
			return err
		}
		counts[c.name] = benchutil.FormatCounts(counter.Take())
	}
	for _, c := range []struct {
		name string
		args []string
	}{{"kubectl-tao logs --tail 1", taoTail}, {"kubectl-tao top", taoTop}} {
		if _, err := benchutil.Measure(env, tao, c.args...); err != nil {
			return err
		}
		counts[c.name] = benchutil.FormatCounts(counter.Take())
	}
	if _, _, err := benchutil.FollowFirstLines(env, tao, ns, job, ranks); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the watches open after the streams
	counts["kubectl-tao logs -f (until every first line)"] = benchutil.FormatCounts(counter.Take())
	if _, err := benchutil.Measure(nil, kubectl, "delete", "job", job, "-n", ns, "--cascade=foreground", "--wait"); err != nil {
		return err
	}

	// cancel against kubectl delete, each on a job of its own, alternating; the last run of
	// each goes through the counter.
	var kdel, ocancel []benchutil.Sample
	for i := 0; i < cancelRuns; i++ {
		for _, c := range []struct {
			name, short, bin string
			args             func(job string) []string
			into             *[]benchutil.Sample
		}{
			{"kubectl delete job --cascade=foreground --wait", "kubectl", kubectl, func(j string) []string {
				return []string{"delete", "job", j, "-n", ns, "--cascade=foreground", "--wait"}
			}, &kdel},
			{"kubectl-tao cancel", "tao", tao, func(j string) []string { return []string{"cancel", j, "-n", ns} }, &ocancel},
		} {
			j := fmt.Sprintf("cancel-%d-%s", i, c.short)
			if err := b.submit(ctx, j); err != nil {
				return err
			}
			var e []string
			if i == cancelRuns-1 {
				e = env
				counter.Take()
			}
			s, err := benchutil.Measure(e, c.bin, c.args(j)...)
			if err != nil {
				return err
			}
			if i == cancelRuns-1 {
				counts[c.name] = benchutil.FormatCounts(counter.Take())
			} else {
				*c.into = append(*c.into, s)
			}
			if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j}); err != nil || len(pods.Items) > 0 {
				return fmt.Errorf("%s returned with pods of %s left (%d, %v)", c.name, j, len(pods.Items), err)
			}
		}
	}
	loadAfter := benchutil.LoadAverage()

	benchutil.PrintSetting(loadBefore, loadAfter)
	fmt.Printf("logs of a %d-pod job, %d lines per pod (%d lines), median of %d runs\n", ranks, lines, want, runs)
	benchutil.Header()
	benchutil.Row(fmt.Sprintf("kubectl logs -l job-name=J --prefix --tail=-1 --max-log-requests=%d", ranks), kLogs)
	benchutil.Row("kubectl-tao logs J", oLogs)
	fmt.Printf("  %-62s %9s\n", fmt.Sprintf("floor: in-process client-go, %d concurrent reads, discarded", ranks), floor.Wall.Round(time.Millisecond))
	fmt.Printf("  ratio kubectl-tao / kubectl: %.3fx (goal <= 0.05x); floor / kubectl: %.3fx\n\n", ratio(oLogs.Wall, kLogs.Wall), ratio(floor.Wall, kLogs.Wall))
	fmt.Printf("top of a %d-rank job against logs --tail 1, median of %d runs\n", ranks, runs)
	benchutil.Header()
	benchutil.Row("kubectl-tao logs J --tail 1", oTail)
	benchutil.Row("kubectl-tao top J", oTop)
	fmt.Printf("  ratio top / logs --tail 1: %.3fx (goal <= 1x)\n\n", ratio(oTop.Wall, oTail.Wall))
	fmt.Printf("kubectl-tao logs -f J: every rank's first line after %s (goal <= 2s), peak RSS %.1f MB (goal <= 200 MB), median of %d runs\n",
		first.Wall.Round(time.Millisecond), first.MB(), followRuns)
	fmt.Printf("  floor: in-process client-go, %d concurrent follows, until each gave a line: %s\n\n", ranks, followFloor.Wall.Round(time.Millisecond))
	if cancelRuns > 1 {
		fmt.Printf("cancel of a %d-rank job, median of %d runs (the last run of each, through the request counter, is not timed)\n", ranks, cancelRuns-1)
		kDel, oCancel := benchutil.Median(kdel), benchutil.Median(ocancel)
		benchutil.Header()
		benchutil.Row("kubectl delete job J --cascade=foreground --wait", kDel)
		benchutil.Row("kubectl-tao cancel J", oCancel)
		fmt.Printf("  ratio kubectl-tao / kubectl: %.3fx (goal <= 1.2x)\n\n", ratio(oCancel.Wall, kDel.Wall))
	}
	fmt.Println("API requests per command")
	for _, k := range []string{"kubectl logs -l", "kubectl-tao logs", "kubectl-tao logs --tail 1", "kubectl-tao top", "kubectl-tao logs -f (until every first line)",
		"kubectl delete job --cascade=foreground --wait", "kubectl-tao cancel"} {
		fmt.Printf("  %-48s %s\n", k, counts[k])
	}
	return nil
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
