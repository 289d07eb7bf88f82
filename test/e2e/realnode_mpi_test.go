//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// Real mpirun: Debian's OpenMPI and mpi4py in local/openmpi:1, an image with no sshd, started on
// every pod by `submit --launcher mpi` through the supervisors' agent.

// mpiAllReduceScript all-reduces the processes' ranks (0+1+2+3 for 4) and prints the sum with the
// host each process runs on.
const mpiAllReduceScript = `import socket, sys
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank, op=MPI.SUM)
sys.stdout.write(f"mpi rank {rank} of {size} on {socket.gethostname()} sum {total}\n")
sys.stdout.flush()
`

// mpiLoopScript all-reduces forever, once every 250 ms, and handles no signal itself.
const mpiLoopScript = `import socket, sys, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
step = 0
while True:
    n = comm.allreduce(1, op=MPI.SUM)
    sys.stdout.write(f"loop rank {rank} on {socket.gethostname()} step {step} world {n}\n")
    sys.stdout.flush()
    step += 1
    time.sleep(0.25)
`

// mpiRetryScript loops as mpiLoopScript on a first attempt, MPI rank 0 saving a checkpoint
// at every step; once any process finds the marker an earlier attempt left on its pod (a
// worker's pod outlives rank 0's), the world runs 4 steps and ends. Each process first says
// its pod's attempt and the checkpoint it was told to resume from.
const mpiRetryScript = `import os, socket, sys, time
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
again = comm.allreduce(int(os.path.exists("/tmp/mpi-ran")), op=MPI.MAX)
open("/tmp/mpi-ran", "w").close()
resume = os.path.basename(os.environ.get("TAO_RESUME_CHECKPOINT", ""))
sys.stdout.write(f"retry rank {rank} attempt {os.environ['TAO_ATTEMPT']} resume [{resume}]\n")
step = 0
while not again or step < 4:
    n = comm.allreduce(1, op=MPI.SUM)
    if rank == 0 and not again:
        with open(os.path.join(os.environ["TAO_CHECKPOINT_DIR"], f"step-{step}.pt"), "w") as f:
            f.write(str(step))
    sys.stdout.write(f"retry rank {rank} on {socket.gethostname()} step {step} world {n} again {again}\n")
    sys.stdout.flush()
    step += 1
    time.sleep(0.25)
`

// mpirunCommand runs a script as 4 processes over the job's hostfile ($TAO_HOSTFILE, OpenMPI's
// default through the job's environment): OpenMPI refuses to start as root unless told, and the
// image runs as root.
const mpirunCommand = "mpirun --allow-run-as-root -np 4 python3 "

// openMPIImage returns the real node's OpenMPI image; without one it skips with the launcher's
// reason, or fails under CI=true, where .ci/run installs openmpi-bin and python3-mpi4py.
func openMPIImage(t *testing.T, n realNodeEnv) string {
	t.Helper()
	return packageImage(t, "OpenMPI", n.OpenMPIImage, n.OpenMPIImageSkip,
		"TAO_OPENMPI_IMAGE is not set (the launcher builds local/openmpi:1 where openmpi-bin and python3-mpi4py are installed)")
}

// TestRealNodeMPI runs real mpirun over 2 pods of 2 slots each, its daemons started on the
// other pod by the job's agent: the 4 processes all-reduce their ranks, each says its host, and
// the job completes. In a looping job, a connection to a worker's agent with a wrong key is
// refused and said in that worker's log, and cancel stops every process of every pod; in
// another, a worker's MPI processes killed mid-run fail the job, mpirun saying why.
func TestRealNodeMPI(t *testing.T) {
	n := stagerNode(t)
	image := openMPIImage(t, n)
	t.Parallel()
	ns := namespace(t)
	flags := func(file string, extra ...string) []string {
		return append([]string{"--image", image, "--stager-image", n.StagerImage, "--nodes", "2", "--launcher", "mpi", "--file", file}, extra...)
	}

	t.Run("all-reduce", func(t *testing.T) {
		t.Parallel()
		const job = "allreduce"
		start := time.Now()
		// Two GPUs a pod, so two slots a pod: the hostfile's default. A small /dev/shm, so that
		// two such pods fit the node's memory.
		submitReal(t, n, ns, job, flags(scriptFile(t, "allreduce.py", mpiAllReduceScript), "--gpus", "2", "--shm-size", "1Gi"), mpirunCommand+"/opt/scripts/allreduce.py")
		waitComplete(t, ns, job)
		t.Logf("submit to Complete: %s", time.Since(start).Round(time.Millisecond))
		checkAllReduce(t, ns, job, true)
	})

	t.Run("wrong-key-and-cancel", func(t *testing.T) {
		t.Parallel()
		const job = "loop"
		submitReal(t, n, ns, job, flags(scriptFile(t, "loop.py", mpiLoopScript), "--slots-per-node", "2", "--shm-size", "1Gi"), mpirunCommand+"/opt/scripts/loop.py")
		// Running means every process has started and all-reduced with the other 3.
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "[rank 0] loop rank 0 on loop-0 step 1 world 4", "[rank 1] loop rank 3 on loop-1 step 1 world 4")

		// The agent client in rank 0's pod, as mpirun runs it, but with another key.
		worker := job + "-1." + job
		r := tao(t, nil, "exec", job, "-n", ns, "--rank", "0", "--", "/bin/bash", "-c",
			"TAO_MPI_KEY=not-the-job-key-0123456789abcdef0123456789abcdef exec /tao-stager/tao-mpi-agent "+worker+" echo ran")
		contains(t, r, 255, "tao-mpi-agent: "+worker+": the MPI agent refused the connection: wrong key")
		if strings.Contains(r.stdout, "ran") {
			t.Errorf("the command ran with a wrong key: %s", r)
		}
		refused := regexp.MustCompile(`kubectl-tao: MPI agent: refused a connection from [0-9.]+:\d+: wrong key`)
		poll(t, 30*time.Second, "the refusal in rank 1's log", func(_ context.Context) (bool, error) {
			return refused.MatchString(tao(t, nil, "logs", job, "-n", ns, "--rank", "1").stdout), nil
		})
		t.Logf("rank 1's log: %s", refused.FindString(tao(t, nil, "logs", job, "-n", ns, "--rank", "1").stdout))

		// Every pod's Python processes, where they are now: rank 1's are its daemon's.
		st := tao(t, nil, "stacks", job, "-n", ns)
		for rank := range 2 {
			if n := strings.Count(st.stdout, fmt.Sprintf("[rank %d] --- process ", rank)); n != 2 {
				t.Errorf("stacks: %d processes of rank %d, want its 2 MPI processes:\n%s", n, rank, st)
			}
		}
		contains(t, st, 0, `[rank 1]   File "/opt/scripts/loop.py", line`)
		t.Logf("stacks (first lines):\n%s", strings.Join(strings.SplitN(st.stdout, "\n", 12)[:11], "\n"))

		// top lists both pods, each printing now in its own log.
		tp := tao(t, nil, "top", job, "-n", ns, "-o", "json")
		var doc struct {
			Status string    `json:"status"`
			Time   time.Time `json:"time"`
			Ranks  []struct {
				Rank           int        `json:"rank"`
				LastOutputTime *time.Time `json:"lastOutputTime"`
			} `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(tp.stdout), &doc); err != nil {
			t.Fatalf("top -o json: %v\n%s", err, tp)
		}
		if doc.Status != "Running" || len(doc.Ranks) != 2 {
			t.Errorf("top: status %q, %d ranks, want Running and 2:\n%s", doc.Status, len(doc.Ranks), tp.stdout)
		}
		for _, r := range doc.Ranks {
			if r.LastOutputTime == nil || doc.Time.Sub(*r.LastOutputTime) > 5*time.Second {
				t.Errorf("top: rank %d's last output at %v, %v: want within 5s, its processes print every 250ms", r.Rank, r.LastOutputTime, doc.Time)
			}
		}

		streams := podLogStreams(t, ns, job)
		cancelQuickly(t, ns, job, 30, "mpirun and the processes it started")
		for rank, s := range streams {
			t.Logf("rank %d's container log after the cancel (last lines):\n%s", rank, lastLines(s.wait(t), 8))
		}
		if r := follow.wait(t, 60*time.Second); r.code != 10 {
			t.Errorf("logs -f of the canceled job: want exit 10 (Canceled), got %s", r)
		}
	})

	t.Run("worker-lost", func(t *testing.T) {
		t.Parallel()
		const job = "lost"
		submitReal(t, n, ns, job, flags(scriptFile(t, "loop.py", mpiLoopScript), "--slots-per-node", "2", "--shm-size", "1Gi"), mpirunCommand+"/opt/scripts/loop.py")
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "[rank 1] loop rank 3 on lost-1 step 1 world 4")
		// OpenMPI's daemon on rank 1's pod dies as in a crash, its processes with it (bash
		// builtins only: the image has no pkill).
		r := tao(t, nil, "exec", job, "-n", ns, "--rank", "1", "--", "/bin/bash", "-c",
			`for p in /proc/[0-9]*; do read -r c < $p/comm 2>/dev/null || continue; case $c in orted|python3) kill -9 ${p#/proc/} && echo killed $c;; esac; done`)
		contains(t, r, 0, "killed orted")
		if err := pollErr(2*time.Minute, jobFinished(ns, job, batchv1.JobFailed)); err != nil {
			t.Fatalf("the job whose worker was lost: %v\n%s", err, tao(t, nil, "logs", job, "-n", ns))
		}
		// mpirun saw its daemon go and ended the whole MPI world: its own words in rank 0's log.
		logs := tao(t, nil, "logs", job, "-n", ns, "--rank", "0")
		contains(t, logs, 0, "ORTE has lost communication with a remote daemon")
		t.Logf("rank 0's log (last lines):\n%s", lastLines(logs.stdout, 12))
		// diagnose names the pod mpirun lost, in mpirun's own line.
		d := tao(t, nil, "diagnose", job, "-n", ns)
		contains(t, d, 0, "MPIPeerLost", "Remote daemon: [[", "on node lost-1.lost")
		t.Logf("diagnose:\n%s", d.stdout)
	})
}

// TestRealNodeMPIRetries kills a worker's MPI processes mid-run under --retries 1 and
// --checkpoint-dir: mpirun ends the world and exits 137, rank 0 exits 1 so that the attempt
// counts, its new pod restores the checkpoints MPI rank 0 saved, waits for the agents again and
// starts a new world on the same worker pod, and the job completes.
func TestRealNodeMPIRetries(t *testing.T) {
	n := stagerNode(t)
	image := openMPIImage(t, n)
	t.Parallel()
	ns := namespace(t)
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "results")
	const job = "retried"
	submitRealEnv(t, srv.Env("results"), n, ns, job, []string{"--image", image, "--stager-image", n.StagerImage, "--nodes", "2", "--launcher", "mpi",
		"--slots-per-node", "2", "--shm-size", "1Gi", "--retries", "1", "--checkpoint-dir", "/ckpt", "--file", scriptFile(t, "retry.py", mpiRetryScript)},
		mpirunCommand+"/opt/scripts/retry.py")
	follow := taoBackground(t, "logs", "-f", job, "-n", ns)
	follow.waitOutput(t, 3*time.Minute, "[rank 1] retry rank 3 on retried-1 step 1 world 4 again 0")
	workers := map[string]bool{}
	for _, p := range jobPods(t, ns, job) {
		if rankOf(&p) == "1" {
			workers[p.Name] = true
		}
	}
	// The worker's MPI processes die as in a crash; its pod, orted and agent stay.
	r := tao(t, nil, "exec", job, "-n", ns, "--rank", "1", "--", "/bin/bash", "-c",
		`for p in /proc/[0-9]*; do read -r c < $p/comm 2>/dev/null || continue; case $c in python3) kill -9 ${p#/proc/} && echo killed $c;; esac; done`)
	contains(t, r, 0, "killed python3")
	waitComplete(t, ns, job)
	out := follow.wait(t, time.Minute)
	contains(t, out, 0, "[rank 1] retry rank 3 on retried-1 step 3 world 4 again 1",
		// The first world's processes started with nothing to resume from.
		"[rank 0] retry rank 0 attempt 1 resume []", "[rank 1] retry rank 2 attempt 1 resume []")
	// Rank 0's new pod restored what MPI rank 0 saved in the first world and was told the newest;
	// the worker's pod, never replaced, is still in its first attempt with its own directory.
	if m := regexp.MustCompile(`\[rank 0\] retry rank 0 attempt 2 resume \[step-(\d+)\.pt\]`).FindStringSubmatch(out.stdout); m == nil || m[1] == "0" {
		t.Errorf("rank 0's second pod did not resume from a checkpoint of the first world:\n%s", out.stdout)
	}
	// Rank 0's first pod failed with 1 (mpirun's 137 turned), and a second one completed the job;
	// the worker's pod is the one the first world ran on.
	var failed, succeeded int
	for _, p := range jobPods(t, ns, job) {
		switch {
		case rankOf(&p) == "1" && !workers[p.Name]:
			t.Errorf("rank 1's pod %s was replaced: an MPI retry restarts the world from rank 0", p.Name)
		case rankOf(&p) != "0":
		case p.Status.Phase == corev1.PodFailed:
			failed++
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 {
					t.Errorf("rank 0's failed pod %s: %+v, want exit 1", p.Name, cs.State)
				}
			}
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		}
	}
	if failed != 1 || succeeded != 1 {
		t.Errorf("rank 0: %d failed and %d succeeded pods, want 1 and 1", failed, succeeded)
	}
	contains(t, out, 0, "kubectl-tao: the launcher exited 137: a process it started, here or on another pod, was killed (SIGKILL); exiting 1")
	t.Logf("logs -f (last lines):\n%s", lastLines(out.stdout, 12))
}

// lastLines is the last n lines of out.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// mpichAllReduceScript is mpiAllReduceScript over MPICH's own library, through ctypes: Debian's
// mpi4py is built for OpenMPI only. MPICH's handles are fixed integers (its mpi.h).
const mpichAllReduceScript = `import ctypes, socket, sys

COMM_WORLD, INT, SUM = 0x44000000, 0x4C000405, 0x58000003
mpi = ctypes.CDLL("libmpich.so.12")
mpi.MPI_Init(None, None)
rank, size, total = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
mpi.MPI_Comm_rank(COMM_WORLD, ctypes.byref(rank))
mpi.MPI_Comm_size(COMM_WORLD, ctypes.byref(size))
mpi.MPI_Allreduce(ctypes.byref(rank), ctypes.byref(total), 1, INT, SUM, COMM_WORLD)
sys.stdout.write(f"mpi rank {rank.value} of {size.value} on {socket.gethostname()} sum {total.value}\n")
sys.stdout.flush()
mpi.MPI_Finalize()
`

// TestRealNodeMPICH runs MPICH's mpiexec (hydra) over 2 pods of 2 slots each, its proxies
// started on the other pod by the job's agent (HYDRA_LAUNCHER_EXEC): the 4 processes all-reduce
// their ranks, each says its host, and the job completes. About one run in ten, MPICH 4.0 over
// UCX never returns from MPI_Finalize after the sums are printed; --hang-timeout ends that
// attempt and the retry completes the job, as it would for a user.
func TestRealNodeMPICH(t *testing.T) {
	n := stagerNode(t)
	image := packageImage(t, "MPICH", n.MPICHImage, n.MPICHImageSkip,
		"TAO_MPICH_IMAGE is not set (the launcher builds local/mpich:1 where mpich is installed)")
	t.Parallel()
	ns := namespace(t)
	const job = "hydra"
	start := time.Now()
	submitReal(t, n, ns, job, []string{"--image", image, "--stager-image", n.StagerImage, "--nodes", "2", "--launcher", "mpi",
		"--file", scriptFile(t, "allreduce.py", mpichAllReduceScript), "--slots-per-node", "2", "--shm-size", "1Gi", "--hang-timeout", "30s", "--retries", "2"},
		"mpirun -n 4 python3 /opt/scripts/allreduce.py")
	waitComplete(t, ns, job)
	t.Logf("submit to Complete: %s", time.Since(start).Round(time.Millisecond))
	checkAllReduce(t, ns, job, false)
}

// checkAllReduce checks the lines of an all-reduce job's 4 processes over 2 pods of 2 slots:
// each says a world of 4 and the sum 6, from the pod it ran on. With ownLogs (OpenMPI, whose
// daemons run each process through the job's fork agent) each line is in the log of the pod
// that printed it; otherwise (MPICH) every line is in rank 0's, as mpiexec forwards it. Every
// pod succeeded: rank 0 told the others the world ended, and they ended by themselves,
// keeping their logs.
func checkAllReduce(t *testing.T, ns, job string, ownLogs bool) {
	t.Helper()
	rx := regexp.MustCompile(`^mpi rank (\d) of (\d) on (\S+) sum (\d+)$`)
	hosts := map[int]string{}
	for pod, lines := range jobLogs(t, ns, job) {
		for _, l := range lines {
			m := rx.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			rank, _ := strconv.Atoi(m[1])
			if m[2] != "4" || m[4] != "6" {
				t.Errorf("%q: want a world of 4 and the sum 6", l)
			}
			want := 0
			if ownLogs {
				want = rank / 2 // the pod it ran on
			}
			if pod != want {
				t.Errorf("%q is in rank %d's log, want rank %d's", l, pod, want)
			}
			hosts[rank] = m[3]
			t.Logf("rank %d's log: %s", pod, l)
		}
	}
	want := map[int]string{0: job + "-0", 1: job + "-0", 2: job + "-1", 3: job + "-1"}
	if fmt.Sprint(hosts) != fmt.Sprint(want) {
		t.Errorf("the processes' hosts: %v, want %v:\n%s", hosts, want, tao(t, nil, "logs", job, "-n", ns).stdout)
	}
	for _, p := range jobPods(t, ns, job) {
		if p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		// Only an attempt --hang-timeout ended (MPICH's, below) may have failed.
		if hung := containerExit(&p) == jobspec.ExitHang; hung {
			t.Logf("pod %s (rank %s): an attempt --hang-timeout ended (exit %d), retried", p.Name, rankOf(&p), jobspec.ExitHang)
			continue
		}
		t.Errorf("pod %s (rank %s) is %s (exit %d), want Succeeded: rank 0 tells the other pods the world ended",
			p.Name, rankOf(&p), p.Status.Phase, containerExit(&p))
	}
}

// containerExit is the exit code of the pod's training container, -1 while it has none.
func containerExit(p *corev1.Pod) int32 {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == jobspec.ContainerName && cs.State.Terminated != nil {
			return cs.State.Terminated.ExitCode
		}
	}
	return -1
}

// TestRealNodeMPILateWorker: rank 1's pod cannot be created until the test lets it (a quota of
// one pod in the namespace), so rank 0's supervisor waits for that pod's agent instead of
// starting mpirun on a world that is not there; once the pod runs, mpirun starts and the job
// completes, rank 0's log saying how long it waited.
func TestRealNodeMPILateWorker(t *testing.T) {
	n := stagerNode(t)
	image := openMPIImage(t, n)
	t.Parallel()
	ns := namespace(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "one-pod", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	if _, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the quota counted", func(ctx context.Context) (bool, error) {
		q, err := client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, err
	})
	const job = "late"
	submitReal(t, n, ns, job, []string{"--image", image, "--stager-image", n.StagerImage, "--nodes", "2", "--launcher", "mpi",
		"--file", scriptFile(t, "allreduce.py", mpiAllReduceScript), "--slots-per-node", "2", "--shm-size", "1Gi"},
		mpirunCommand+"/opt/scripts/allreduce.py")
	// The Job controller creates an Indexed Job's pods lowest index first, one in its first batch.
	poll(t, 2*time.Minute, "rank 0 running alone", func(context.Context) (bool, error) {
		pods := jobPods(t, ns, job)
		if len(pods) == 1 && jobpods.Rank(&pods[0]) != 0 {
			t.Fatalf("the quota let rank %d's pod in first, not rank 0's", jobpods.Rank(&pods[0]))
		}
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning, nil
	})
	// Long enough for a launcher that did not wait to have failed by now.
	const held = 15 * time.Second
	time.Sleep(held)
	r := tao(t, nil, "logs", job, "-n", ns, "--rank", "0")
	if strings.Contains(r.stdout, "mpi rank") || strings.Contains(r.stdout, "answered after") {
		t.Fatalf("rank 0 ran the command without rank 1's pod:\n%s", r)
	}
	if err := client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitComplete(t, ns, job)
	checkAllReduce(t, ns, job, true)
	// A Go duration: the Job controller's back-off after the quota's refusals can take it past a
	// minute (1m15.6s).
	m := regexp.MustCompile(`kubectl-tao: the MPI agent of every other pod \(1\) answered after ((?:\d+m)?[0-9.]+s): running the command`).FindStringSubmatch(tao(t, nil, "logs", job, "-n", ns, "--rank", "0").stdout)
	if m == nil {
		t.Fatalf("rank 0's log does not say how long it waited:\n%s", tao(t, nil, "logs", job, "-n", ns))
	}
	t.Logf("rank 0: %s", m[0])
	if waited, err := time.ParseDuration(m[1]); err != nil || waited < held {
		t.Errorf("rank 0 waited %s for rank 1's agent (%v), less than the %s its pod was held back", m[1], err, held)
	}
}
