//go:build e2e

package localcluster

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// TestMain lets the test binary double as the launcher's helpers: Up starts a copy of the
// running executable as the logsim daemon and the real node's device plugin, and containerd
// runs it as runc-noseccomp; here that executable is this binary rather than cmd/localcluster.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == RuncWrapperName {
		fmt.Fprintln(os.Stderr, RunRuncWrapper(os.Args[0], os.Args[1:]))
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "deviceplugin" {
		fs := flag.NewFlagSet("deviceplugin", flag.ExitOnError)
		stateDir := fs.String("state-dir", "", "")
		gpus := fs.Int("gpus", RealNodeGPUs, "")
		migSlices := fs.Int("mig-slices", 0, "")
		_ = fs.Parse(os.Args[2:])
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := RunDevicePlugin(ctx, *stateDir, *gpus, *migSlices, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "logsim" {
		fs := flag.NewFlagSet("logsim", flag.ExitOnError)
		stateDir := fs.String("state-dir", "", "")
		_ = fs.Parse(os.Args[2:])
		if err := RunLogsim(context.Background(), *stateDir, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestLocalClusterEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := testCluster(t, 4, RealNodeOff, 0)
	start := time.Now()
	if err := Up(ctx, cfg); err != nil {
		t.Fatalf("up: %v", err)
	}
	t.Logf("up took %s", time.Since(start))
	stopped := false
	defer func() {
		if !stopped {
			_ = Down(context.Background(), cfg)
		}
	}()

	start = time.Now()
	if err := Up(ctx, cfg); err != nil {
		t.Fatalf("second up (reuse): %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("reusing a healthy cluster took %s", d)
	}

	rc, err := RESTConfig(KubeconfigPath(cfg.StateDir))
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)

	t.Run("nodes", func(t *testing.T) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 4 {
			t.Fatalf("%d nodes, want 4", len(nodes.Items))
		}
		for _, n := range nodes.Items {
			gpus := n.Status.Allocatable[GPUResource]
			if gpus.Value() != 8 {
				t.Errorf("%s: %s GPUs allocatable", n.Name, gpus.String())
			}
			if !nodeReady(&n) {
				t.Errorf("%s not Ready", n.Name)
			}
		}
	})

	t.Run("fates", func(t *testing.T) {
		t.Run("succeed", func(t *testing.T) {
			t.Parallel()
			job := testJob("ok", map[string]string{AnnotationRunDuration: "1s"}, 1, false)
			if _, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "job ok Complete", func() (bool, error) {
				j, err := cs.BatchV1().Jobs("default").Get(ctx, "ok", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				return jobCondition(j, batchv1.JobComplete), nil
			})
		})
		t.Run("oom", func(t *testing.T) {
			t.Parallel()
			st := runToTermination(ctx, t, cs, testPod("oom", map[string]string{AnnotationFate: FateOOM, AnnotationRunDuration: "1s"}, 1))
			if st.pod.Status.Phase != corev1.PodFailed || st.term.Reason != "OOMKilled" || st.term.ExitCode != 137 {
				t.Errorf("phase %s, reason %s, exit %d; want Failed, OOMKilled, 137", st.pod.Status.Phase, st.term.Reason, st.term.ExitCode)
			}
		})
		t.Run("exit", func(t *testing.T) {
			t.Parallel()
			st := runToTermination(ctx, t, cs, testPod("exit3", map[string]string{AnnotationFate: FateExit, AnnotationExitCode: "3", AnnotationRunDuration: "1s"}, 1))
			if st.pod.Status.Phase != corev1.PodFailed || st.term.Reason != "Error" || st.term.ExitCode != 3 {
				t.Errorf("phase %s, reason %s, exit %d; want Failed, Error, 3", st.pod.Status.Phase, st.term.Reason, st.term.ExitCode)
			}
		})
		t.Run("evict", func(t *testing.T) {
			t.Parallel()
			pod := testPod("evictee", map[string]string{AnnotationRunDuration: "3s"}, 1)
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "evictee Running", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "evictee", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning, err
			})
			patch := []byte(`{"metadata":{"labels":{"` + LabelEvict + `":"true"}}}`)
			if _, err := cs.CoreV1().Pods("default").Patch(ctx, "evictee", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			check := func() {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "evictee", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var dt *corev1.PodCondition
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
						dt = &p.Status.Conditions[i]
					}
				}
				term := p.Status.ContainerStatuses[0].State.Terminated
				if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" || dt == nil || dt.Status != corev1.ConditionTrue ||
					dt.Reason != "TerminationByKubelet" || term == nil || term.ExitCode != 137 {
					t.Errorf("phase %s, reason %s, DisruptionTarget %+v, terminated %+v; want Failed, Evicted, True TerminationByKubelet, 137",
						p.Status.Phase, p.Status.Reason, dt, term)
				}
			}
			waitFor(ctx, t, "evictee Failed", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "evictee", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodFailed, err
			})
			check()
			// Past its run-duration the pod must stay evicted: no other fate may finish it.
			pastRunDuration(ctx, t, cs, "evictee", "3s")
			check()
		})
		t.Run("crash", func(t *testing.T) {
			t.Parallel()
			pod := testPod("crashee", map[string]string{AnnotationRunDuration: "3s"}, 1)
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "crashee Running", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "crashee", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning, err
			})
			patch := []byte(`{"metadata":{"labels":{"` + LabelCrash + `":"134"}}}`)
			if _, err := cs.CoreV1().Pods("default").Patch(ctx, "crashee", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			var p *corev1.Pod
			waitFor(ctx, t, "crashee Failed", func() (bool, error) {
				var err error
				p, err = cs.CoreV1().Pods("default").Get(ctx, "crashee", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodFailed, err
			})
			pastRunDuration(ctx, t, cs, "crashee", "3s") // still crashed, not completed
			p, _ = cs.CoreV1().Pods("default").Get(ctx, "crashee", metav1.GetOptions{})
			term := p.Status.ContainerStatuses[0].State.Terminated
			if p.Status.Phase != corev1.PodFailed || term == nil || term.ExitCode != 134 || term.Reason != "Error" {
				t.Errorf("phase %s, terminated %+v; want Failed, Error, 134", p.Status.Phase, term)
			}
		})
		t.Run("image-pull-backoff", func(t *testing.T) {
			t.Parallel()
			if _, err := cs.CoreV1().Pods("default").Create(ctx, testPod("pull", map[string]string{AnnotationFate: FateImagePullBackOff}, 1), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "ImagePullBackOff and its events", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "pull", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil ||
					p.Status.ContainerStatuses[0].State.Waiting.Reason != "ImagePullBackOff" || p.Status.Phase != corev1.PodPending {
					return false, nil
				}
				reasons := podEventReasons(ctx, cs, p, corev1.EventTypeWarning)
				return reasons["Failed"] && reasons["BackOff"], nil
			})
		})
		t.Run("run-forever and start-delay", func(t *testing.T) {
			t.Parallel()
			pod := testPod("forever", map[string]string{AnnotationFate: FateRunForever, AnnotationRunDuration: "1s", AnnotationStartDelay: "2s"}, 1)
			if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Judged by the pod's own stamps, not by when this test looks: it started no sooner
			// than its start-delay after its creation (both stamps are whole seconds, and
			// floor(a)-floor(b) >= floor(a-b)).
			var p *corev1.Pod
			waitFor(ctx, t, "forever Running", func() (bool, error) {
				var err error
				p, err = cs.CoreV1().Pods("default").Get(ctx, "forever", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning, err
			})
			if run := p.Status.ContainerStatuses[0].State.Running; run == nil || run.StartedAt.Sub(p.CreationTimestamp.Time) < 2*time.Second {
				t.Errorf("created %s, running %+v: want its 2s start-delay first", p.CreationTimestamp, run)
			}
			pastRunDuration(ctx, t, cs, "forever", "1s")
			if p, _ := cs.CoreV1().Pods("default").Get(ctx, "forever", metav1.GetOptions{}); p.Status.Phase != corev1.PodRunning {
				t.Errorf("phase %s after start-delay + run-duration; want Running forever", p.Status.Phase)
			}
		})
		t.Run("too many GPUs", func(t *testing.T) {
			t.Parallel()
			if _, err := cs.CoreV1().Pods("default").Create(ctx, testPod("greedy", nil, 9), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(ctx, t, "Unschedulable for lack of GPUs", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "greedy", metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
						if !strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
							return false, fmt.Errorf("unschedulable for another reason: %s", c.Message)
						}
						return p.Status.Phase == corev1.PodPending, nil
					}
				}
				return false, nil
			})
		})
		t.Run("indexed job logs", func(t *testing.T) {
			t.Parallel()
			job := testJob("ranks", map[string]string{AnnotationRunDuration: "2s", AnnotationLogLines: "5"}, 2, true)
			if _, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var logs string
			waitFor(ctx, t, "logs of rank 1", func() (bool, error) {
				pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=ranks"})
				if err != nil {
					return false, err
				}
				for _, p := range pods.Items {
					if p.Annotations[CompletionIndexAnnotation] != "1" {
						continue
					}
					data, err := cs.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptrTo[int64](3)}).DoRaw(ctx)
					if err != nil {
						return false, nil
					}
					logs = string(data)
					return logs == "rank 1 step 3\nrank 1 step 4\nrank 1 step 5\n", nil
				}
				return false, nil
			})
		})
		t.Run("followed logs with interval", func(t *testing.T) {
			t.Parallel()
			pod := testPod("paced", map[string]string{AnnotationFate: FateRunForever, AnnotationLogLines: "4", AnnotationLogInterval: "1s"}, 0)
			if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// An unscheduled pod's log is an empty 200 response, on a real cluster too.
			waitFor(ctx, t, "paced running", func() (bool, error) {
				p, err := cs.CoreV1().Pods("default").Get(ctx, "paced", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning, nil
			})
			var stream interface {
				Read([]byte) (int, error)
				Close() error
			}
			var opened time.Time
			waitFor(ctx, t, "log stream", func() (bool, error) {
				opened = time.Now()
				s, err := cs.CoreV1().Pods("default").GetLogs("paced", &corev1.PodLogOptions{Follow: true, Timestamps: true}).Stream(ctx)
				if err != nil {
					return false, nil
				}
				stream = s
				return true, nil
			})
			defer stream.Close()
			sc := bufio.NewScanner(stream)
			var got []string
			var written, arrived []time.Time
			for len(got) < 4 && sc.Scan() {
				f := strings.SplitN(sc.Text(), " ", 2)
				ts, err := time.Parse(time.RFC3339Nano, f[0])
				if err != nil || len(f) != 2 {
					t.Fatalf("line without timestamp: %q", sc.Text())
				}
				got = append(got, f[1])
				written = append(written, ts)
				arrived = append(arrived, time.Now())
			}
			if strings.Join(got, ",") != "rank 0 step 1,rank 0 step 2,rank 0 step 3,rank 0 step 4" {
				t.Fatalf("followed lines %q (stream error: %v)", got, sc.Err())
			}
			// Paced and followed, not dumped: the lines are stamped 1s apart, and a line stamped
			// after the stream opened reaches the follower no earlier than its stamp (same host
			// clock). Measured against the stamps, not against when the stream opened, which a
			// loaded machine may delay past the first lines.
			live := 0
			for k := range written {
				if k > 0 {
					if gap := written[k].Sub(written[k-1]); gap < 950*time.Millisecond || gap > 1050*time.Millisecond {
						t.Errorf("lines %d and %d stamped %s apart, want 1s", k, k+1, gap)
					}
				}
				if written[k].After(opened) {
					live++
					if early := written[k].Sub(arrived[k]); early > 50*time.Millisecond {
						t.Errorf("line %d arrived %s before its stamp: written ahead, not followed", k+1, early)
					}
				}
			}
			if live == 0 {
				t.Errorf("the stream opened at %s, after all four lines (last stamped %s): nothing was followed live", opened.Format(time.RFC3339Nano), written[3].Format(time.RFC3339Nano))
			}
		})
	})

	// A component's port is in the ephemeral range, so while it is down a dial can hold it for a
	// moment (a client that connects to itself); starting it again must wait that out, not fail.
	t.Run("start waits out a port held for a moment", func(t *testing.T) {
		st, err := ReadState(cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		stopping := time.Now()
		if err := ControlComponent(ctx, cfg, ActionStop, CompAPIServer); err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver stopped in %s", time.Since(stopping).Round(time.Millisecond))
		// Held by a listener (the stopped server's sockets linger in TIME_WAIT on the port, so
		// only a socket with SO_REUSEADDR may bind it, and only a listening one keeps another
		// out); it hangs up on every connection, so the launcher's readiness probes fail at once
		// instead of waiting for an answer.
		held, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", st.Ports.APIServer))
		if err != nil {
			t.Fatalf("hold the stopped kube-apiserver's port: %v", err)
		}
		go func() {
			for {
				conn, err := held.Accept()
				if err != nil {
					return
				}
				_ = conn.Close()
			}
		}()
		const hold = 2 * time.Second
		defer time.AfterFunc(hold, func() { _ = held.Close() }).Stop()
		defer held.Close()
		began := time.Now()
		if err := ControlComponent(ctx, cfg, ActionStart, CompAPIServer); err != nil {
			t.Fatalf("start with its port held for %s: %v", hold, err)
		}
		took := time.Since(began)
		t.Logf("started again in %s, its port held for the first %s", took.Round(time.Millisecond), hold)
		if took < hold {
			t.Errorf("started in %s, before the port was free (%s): the test held nothing", took, hold)
		}
		if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("the API after the start: %v", err)
		}
	})

	stopped = true
	if err := Down(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	var exes []string
	for _, b := range Binaries(DefaultKubeVersion()) {
		exes = append(exes, b.Path(cfg.CacheDir))
	}
	exes = append(exes, logsimExe(cfg.StateDir))
	if left := findOurProcesses(cfg.StateDir, exes, ReadProc); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
	if _, err := os.Stat(cfg.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir left after down: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testPod(name string, ann map[string]string, gpus int64) *corev1.Pod {
	res := corev1.ResourceList{}
	if gpus > 0 {
		res[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:      "trainer",
				Image:     "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Limits: res},
			}},
		},
	}
}

func testJob(name string, ann map[string]string, n int32, indexed bool) *batchv1.Job {
	pod := testPod("", ann, 1)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Completions:  &n,
			Parallelism:  &n,
			BackoffLimit: ptrTo[int32](0),
			Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: pod.Spec},
		},
	}
	if indexed {
		job.Spec.CompletionMode = ptrTo(batchv1.IndexedCompletion)
	}
	return job
}

type termination struct {
	pod  *corev1.Pod
	term *corev1.ContainerStateTerminated
}

func runToTermination(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) termination {
	t.Helper()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out termination
	waitFor(ctx, t, "pod "+pod.Name+" terminated", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			return false, nil
		}
		out = termination{pod: p, term: p.Status.ContainerStatuses[0].State.Terminated}
		return true, nil
	})
	return out
}

// pastRunDuration returns once the simulator has ended, at its run-duration, a plain pod
// started after the pod of the test (name): from then on the stage that would end that pod at
// the same run-duration has had its turn, so "it is still X" is the simulator's verdict, not
// a matter of how long this test slept.
func pastRunDuration(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, runDuration string) {
	t.Helper()
	control := testPod(name+"-control", map[string]string{AnnotationRunDuration: runDuration}, 0)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, control, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, control.Name+" Succeeded after "+runDuration, func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, control.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded, err
	})
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func podEventReasons(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, typ string) map[string]bool {
	evs, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, e := range evs.Items {
		if e.Type == typ && e.InvolvedObject.UID == p.UID {
			out[e.Reason] = true
		}
	}
	return out
}
