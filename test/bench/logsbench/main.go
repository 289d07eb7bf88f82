// Command logsbench measures kubectl-tao against kubectl on the local cluster, side by side in
// one run: `logs` of a 64-rank job with 2,000 lines per rank against `kubectl logs -l`, how soon
// `logs -f` shows every rank's first line, and `status -o json` against `kubectl get job -o
// json`: median wall and CPU time, peak memory, ratios, and the API requests each command
// sends (through a counting proxy). `make bench` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/test/bench/benchutil"
)

func main() {
	ranks := flag.Int("ranks", 64, "pods of the job")
	lines := flag.Int("lines", 2000, "log lines per pod")
	tools := benchutil.ToolFlags(5, "runs of each logs command")
	statusRuns := flag.Int("status-runs", 21, "runs of each status command; the median is reported")
	followRuns := flag.Int("follow-runs", 5, "runs of logs -f; the median is reported")
	benchutil.Main(func() error {
		return run(*ranks, *lines, tools.Runs, *statusRuns, *followRuns, tools.Tao, tools.Kubectl)
	})
}

func run(ranks, lines, runs, statusRuns, followRuns int, tao, kubectl string) error {
	cfg, err := benchutil.Config()
	if err != nil {
		return err
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	ns, deleteNS, err := benchutil.Namespace(ctx, client, "bench")
	if err != nil {
		return err
	}
	defer deleteNS()
	const job = "bench"
	if _, err := benchutil.Measure(nil, tao, "submit", job, "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", fmt.Sprint(ranks),
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--annotation", fmt.Sprintf("sim.kubectl-tao.dev/log-lines=%d", lines), "--", "train"); err != nil {
		return err
	}
	want := ranks * lines
	fmt.Fprintf(os.Stderr, "waiting for %d pods x %d lines...\n", ranks, lines)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := benchutil.Measure(nil, tao, "logs", job, "-n", ns, "--tail", "1")
		if err == nil && s.Lines == ranks {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the job's %d pods did not all start: %v", ranks, err)
		}
		time.Sleep(time.Second)
	}
	loadBefore := benchutil.LoadAverage()

	// logs, no follow: the two commands alternate so that load changes hit both alike.
	kubectlLogs := []string{"logs", "-l", "job-name=" + job, "-n", ns, "--prefix", "--tail=-1", fmt.Sprintf("--max-log-requests=%d", ranks)}
	taoLogs := []string{"logs", job, "-n", ns}
	var ktl, ours []benchutil.Sample
	for i := 0; i < runs; i++ {
		s, err := benchutil.Measure(nil, kubectl, kubectlLogs...)
		if err != nil {
			return err
		}
		if s.Lines != want {
			return fmt.Errorf("kubectl printed %d lines, want %d", s.Lines, want)
		}
		ktl = append(ktl, s)
		s, err = benchutil.Measure(nil, tao, taoLogs...)
		if err != nil {
			return err
		}
		if s.Lines != want {
			return fmt.Errorf("kubectl-tao printed %d lines, want %d", s.Lines, want)
		}
		ours = append(ours, s)
	}
	kLogs, oLogs := benchutil.Median(ktl), benchutil.Median(ours)
	// The floor: this process, already started, reading the 64 logs concurrently with a typed
	// client and discarding them. What the server takes, with no start-up and no printing.
	var floors []benchutil.Sample
	for i := 0; i < runs; i++ {
		d, err := benchutil.FetchAll(ctx, cfg, ns, job)
		if err != nil {
			return err
		}
		floors = append(floors, benchutil.Sample{Wall: d})
	}
	floor := benchutil.Median(floors)

	// status -o json against kubectl get job -o json.
	var kst, ost []benchutil.Sample
	for i := 0; i < statusRuns; i++ {
		s, err := benchutil.Measure(nil, kubectl, "get", "job", job, "-n", ns, "-o", "json")
		if err != nil {
			return err
		}
		kst = append(kst, s)
		s, err = benchutil.Measure(nil, tao, "status", job, "-n", ns, "-o", "json")
		if err != nil {
			return err
		}
		ost = append(ost, s)
	}
	kStatus, oStatus := benchutil.Median(kst), benchutil.Median(ost)

	// logs -f: time until every rank has printed a line.
	var firsts []time.Duration
	for i := 0; i < followRuns; i++ {
		d, _, err := benchutil.FollowFirstLines(nil, tao, ns, job, ranks)
		if err != nil {
			return err
		}
		firsts = append(firsts, d)
	}
	first := benchutil.Median(toSamples(firsts)).Wall
	loadAfter := benchutil.LoadAverage()

	// API requests, through a counting proxy (not timed).
	counter, err := benchutil.NewCounter(cfg, ns)
	if err != nil {
		return err
	}
	defer counter.Close()
	env := []string{"KUBECONFIG=" + counter.Kubeconfig}
	counts := map[string]string{}
	for _, c := range []struct {
		name string
		bin  string
		args []string
	}{
		{"kubectl logs -l", kubectl, kubectlLogs},
		{"kubectl-tao logs", tao, taoLogs},
		{"kubectl get job -o json", kubectl, []string{"get", "job", job, "-n", ns, "-o", "json"}},
		{"kubectl-tao status -o json", tao, []string{"status", job, "-n", ns, "-o", "json"}},
	} {
		if _, err := benchutil.Measure(env, c.bin, c.args...); err != nil {
			return err
		}
		counts[c.name] = benchutil.FormatCounts(counter.Take())
	}
	if _, _, err := benchutil.FollowFirstLines(env, tao, ns, job, ranks); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // the watches open after the streams
	counts["kubectl-tao logs -f (until every first line)"] = benchutil.FormatCounts(counter.Take())

	benchutil.PrintSetting(loadBefore, loadAfter)
	fmt.Printf("logs of a %d-pod job, %d lines per pod (%d lines), median of %d runs\n", ranks, lines, want, runs)
	benchutil.Header()
	benchutil.Row(fmt.Sprintf("kubectl logs -l job-name=J --prefix --tail=-1 --max-log-requests=%d", ranks), kLogs)
	benchutil.Row("kubectl-tao logs J", oLogs)
	fmt.Printf("  %-62s %9s\n", "floor: in-process client-go, 64 concurrent reads, discarded", floor.Wall.Round(time.Millisecond))
	fmt.Printf("  ratio kubectl-tao / kubectl: %.3fx (goal <= 0.05x); floor / kubectl: %.3fx\n\n", ratio(oLogs.Wall, kLogs.Wall), ratio(floor.Wall, kLogs.Wall))
	fmt.Printf("status, median of %d runs\n", statusRuns)
	benchutil.Header()
	benchutil.Row("kubectl get job J -o json", kStatus)
	benchutil.Row("kubectl-tao status J -o json", oStatus)
	fmt.Printf("  ratio kubectl-tao / kubectl: %.3fx (goal <= 0.4x)\n\n", ratio(oStatus.Wall, kStatus.Wall))
	fmt.Printf("kubectl-tao logs -f J: every rank's first line after %s, median of %d runs (goal <= 1s)\n\n", first.Round(time.Millisecond), followRuns)
	fmt.Println("API requests per command")
	for _, k := range []string{"kubectl logs -l", "kubectl-tao logs", "kubectl-tao logs -f (until every first line)", "kubectl get job -o json", "kubectl-tao status -o json"} {
		fmt.Printf("  %-46s %s\n", k, counts[k])
	}
	return nil
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func toSamples(ds []time.Duration) []benchutil.Sample {
	out := make([]benchutil.Sample, len(ds))
	for i, d := range ds {
		out[i].Wall = d
	}
	return out
}
