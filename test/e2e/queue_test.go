//go:build e2e

package e2e

import (
	"context"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

var workloadGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// launcher runs the local cluster's launcher on the suite's cluster: `localcluster VERB
// --state-dir DIR ARGS...`, returning its stdout. `make e2e` passes the launcher and the state dir.
func launcher(t *testing.T, verb string, args ...string) (string, error) {
	t.Helper()
	exe, stateDir := os.Getenv("LOCALCLUSTER"), os.Getenv("LOCALCLUSTER_STATE_DIR")
	if exe == "" || stateDir == "" {
		t.Fatal("LOCALCLUSTER and LOCALCLUSTER_STATE_DIR must be set (make e2e sets them): the queue tests change the suite's cluster through its launcher")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	c := exec.CommandContext(ctx, exe, append([]string{verb, "--state-dir", stateDir}, args...)...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("localcluster %s %s: %v\n%s%s", verb, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// kueueUp runs Kueue's real manager on the suite's cluster (`localcluster kueue-up`: its CRDs,
// the manager as a host process, batch/Job integration on) and removes it all again when the
// test ends (`localcluster kueue-down`), so that later tests see a cluster without Kueue, as the
// ones before did. `make e2e` builds Kueue into the cluster cache and passes the launcher.
func kueueUp(t *testing.T) {
	t.Helper()
	if _, err := launcher(t, "kueue-up"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := launcher(t, "kueue-down"); err != nil {
			t.Error(err)
		}
		if _, err := client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2"); err == nil {
			t.Error("Kueue's API still served after kueue-down: later tests may see Kueue installed")
		}
	})
}

func pollErr(timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if ok, err := cond(ctx); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func kueueResource(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: resource}
}

func createKueueObject(t *testing.T, dyn dynamic.Interface, resource, ns string, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var ri dynamic.ResourceInterface = dyn.Resource(kueueResource(resource))
	if ns != "" {
		ri = dyn.Resource(kueueResource(resource)).Namespace(ns)
	}
	if _, err := ri.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// createClusterQueue makes a ResourceFlavor for the simulated nodes' GPU product and a
// ClusterQueue named name with gpus nvidia.com/gpu of nominal quota (cpu and memory, which every
// pod requests a little of, are only headroom); both go when the test ends.
func createClusterQueue(t *testing.T, dyn dynamic.Interface, name string, gpus int) {
	t.Helper()
	createKueueObject(t, dyn, "resourceflavors", "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": name + "-gpu"},
	})
	createKueueObject(t, dyn, "clusterqueues", "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
				"flavors": []any{map[string]any{
					"name": name + "-gpu",
					"resources": []any{
						map[string]any{"name": "cpu", "nominalQuota": "1000"},
						map[string]any{"name": "memory", "nominalQuota": "10Ti"},
						map[string]any{"name": "nvidia.com/gpu", "nominalQuota": strconv.Itoa(gpus)},
					},
				}},
			}},
		},
	})
}

func createLocalQueue(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	createKueueObject(t, dyn, "localqueues", ns, map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"clusterQueue": "cluster-queue"},
	})
}

// workloadsOf lists the Workloads Kueue made for the Job with uid.
func workloadsOf(ctx context.Context, dyn dynamic.Interface, ns string, uid types.UID) ([]unstructured.Unstructured, error) {
	list, err := dyn.Resource(workloadGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "kueue.x-k8s.io/job-uid=" + string(uid)})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitWorkload returns the Job name once Kueue has made its Workload.
func waitWorkload(t *testing.T, dyn dynamic.Interface, ns, name string) *batchv1.Job {
	t.Helper()
	job, err := client.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "Kueue's Workload for "+name, func(ctx context.Context) (bool, error) {
		wls, err := workloadsOf(ctx, dyn, ns, job.UID)
		return len(wls) == 1, err
	})
	return job
}

// kueueObject names one Kueue object: its resource, namespace ("" for cluster-scoped) and name.
type kueueObject struct{ resource, namespace, name string }

// removeQueued cancels those of jobs that exist, waits until their Workloads are gone, then
// deletes objects in order, waiting for each to be gone. A subtest's cleanup runs it so that it
// leaves Kueue nothing to finalize, even when it fails: kueue-down removes Kueue's API, which
// waits for every Workload and ClusterQueue to be gone.
func removeQueued(t *testing.T, dyn dynamic.Interface, ns string, jobs []string, objects []kueueObject) {
	t.Helper()
	ctx := context.Background()
	var uids []types.UID
	for _, name := range jobs {
		if job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			uids = append(uids, job.UID)
			tao(t, nil, "cancel", name, "-n", ns)
		}
	}
	poll(t, 60*time.Second, fmt.Sprintf("the Workloads of %v to be gone", jobs), func(ctx context.Context) (bool, error) {
		for _, uid := range uids {
			if wls, err := workloadsOf(ctx, dyn, ns, uid); err != nil || len(wls) != 0 {
				return false, err
			}
		}
		return true, nil
	})
	for _, o := range objects {
		ri := dyn.Resource(kueueResource(o.resource)).Namespace(o.namespace)
		if err := ri.Delete(ctx, o.name, metav1.DeleteOptions{}); ignoreNotFound(err) != nil {
			t.Error(err)
		}
		poll(t, 60*time.Second, o.name+" to be gone", func(ctx context.Context) (bool, error) {
			_, err := ri.Get(ctx, o.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), ignoreNotFound(err)
		})
	}
}

// createPreemptingClusterQueue makes a ClusterQueue of the flavor cluster-queue-gpu with the
// given memory and GPU quota (CPU only headroom) that preempts lower priorities within itself.
func createPreemptingClusterQueue(t *testing.T, dyn dynamic.Interface, name, memory, gpus string) {
	t.Helper()
	createKueueObject(t, dyn, "clusterqueues", "", map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"namespaceSelector": map[string]any{},
			"preemption":        map[string]any{"withinClusterQueue": "LowerPriority"},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
				"flavors": []any{map[string]any{"name": "cluster-queue-gpu", "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": "1000"},
					map[string]any{"name": "memory", "nominalQuota": memory},
					map[string]any{"name": "nvidia.com/gpu", "nominalQuota": gpus},
				}}},
			}},
		},
	})
}

// queuePositions reports whether the cluster serves Kueue's visibility API, where queue
// positions come from. Kueue keeps that API's certificate in /visibility, a path it hard-codes,
// so a launcher that is not root runs Kueue without it, and the plugin says where a job waits
// without its position. As root (every CI run) its absence fails the test.
func queuePositions(t *testing.T) bool {
	t.Helper()
	_, err := client.Discovery().ServerResourcesForGroupVersion("visibility.kueue.x-k8s.io/v1beta2")
	if err != nil && os.Geteuid() == 0 {
		t.Fatalf("Kueue's visibility API is not served (queue positions): %v", err)
	}
	return err == nil
}

// noPositionsReason is the skip of a test about queue positions on a run that is not root.
const noPositionsReason = "queue positions: Kueue's visibility API needs root (Kueue keeps its certificate in /visibility)"

// positionAt is how wait says where a queued job waits: "at position N" where Kueue's
// visibility API is served, nothing where it is not.
func positionAt(positions bool, n int) string {
	if !positions {
		return ""
	}
	return fmt.Sprintf(" at position %d", n)
}

// TestQueue runs its cases in order: Kueue absent first, then with its CRD applied.
func TestQueue(t *testing.T) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	if _, err := client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2"); err == nil {
		t.Fatal("Kueue's API is already served on this cluster: the not-installed case cannot run")
	}

	t.Run("Kueue not installed is refused", func(t *testing.T) {
		ns := namespace(t)
		r := tao(t, nil, "submit", "q", "-n", ns, "--image", "img", "--queue", "team-a", "--", "true")
		contains(t, r, 3, "Kueue is not installed", "stay suspended forever", "without --queue")
		assertNoObjects(t, ns)
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "team-a"), 11, "queue", "FAIL", "Kueue is not installed")
	})

	kueueUp(t)
	ns := namespace(t)
	// 16 GPUs: one 2x8 job at a time, on a cluster of 32.
	createClusterQueue(t, dyn, "cluster-queue", 16)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = dyn.Resource(kueueResource("clusterqueues")).Delete(ctx, "cluster-queue", metav1.DeleteOptions{})
		_ = dyn.Resource(kueueResource("resourceflavors")).Delete(ctx, "cluster-queue-gpu", metav1.DeleteOptions{})
	})
	createLocalQueue(t, dyn, ns, "team-a")

	t.Run("missing LocalQueue is refused", func(t *testing.T) {
		r := tao(t, nil, "submit", "q", "-n", ns, "--image", "img", "--queue", "nope", "--", "true")
		contains(t, r, 3, `no LocalQueue "nope" in namespace `+ns, "LocalQueues there: team-a", "kubectl get localqueues -n "+ns)
		assertNoObjects(t, ns)
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "nope"), 11, `no LocalQueue "nope"`)
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "team-a"), 0, "LocalQueue team-a exists in namespace "+ns,
			"points at ClusterQueue cluster-queue, whose quota can hold the job")
		contains(t, tao(t, nil, "preflight", "-n", ns, "--gpus", "8", "--nodes", "2"), 0, "a 2-node job without --queue on a cluster with Kueue")
		// A WorkloadPriorityClass that does not exist is refused before anything is created.
		r = tao(t, nil, "submit", "q", "-n", ns, "--image", "img", "--queue", "team-a", "--priority-class", "nope", "--", "true")
		contains(t, r, 3, `no Kueue WorkloadPriorityClass "nope"`)
		assertNoObjects(t, ns)
	})

	t.Run("a job over the ClusterQueue's quota is refused and nothing is created", func(t *testing.T) {
		r := tao(t, nil, "submit", "big", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "3", "--queue", "team-a", "--", "true")
		contains(t, r, 7, "--queue team-a: the job needs 24 nvidia.com/gpu but ClusterQueue cluster-queue can hold at most 16")
		assertNoObjects(t, ns)
	})

	t.Run("Kueue admits a 2x8 job whole, queues the next until it ends, and cancel removes a queued one", func(t *testing.T) {
		ctx := context.Background()
		// The first job takes the whole quota; Kueue admits it and both ranks start together.
		r := tao(t, nil, "submit", "first", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a",
			"--annotation", "sim.kubectl-tao.dev/run-duration=30s", "--", "torchrun train.py")
		contains(t, r, 0, "job.batch/first created", "queued in LocalQueue team-a")
		poll(t, 30*time.Second, "Kueue to admit first and both its ranks to run", runningPods(ns, "first", 2))

		// Watch the Job from before it exists, to see the order in which it changes.
		w, err := client.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=ddp"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		r = tao(t, nil, "submit", "ddp", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a",
			"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "torchrun train.py")
		contains(t, r, 0, "job.batch/ddp created", "service/ddp created", "queued in LocalQueue team-a")

		svc, err := client.CoreV1().Services(ns).Get(ctx, "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// resourceVersions are opaque to clients, but on one etcd they are its revisions: the
		// Service was stored before the Job got its queue label exactly when its revision is lower.
		svcRV, _ := strconv.ParseInt(svc.ResourceVersion, 10, 64)
		var labelledRV int64
		first := true
		timeout := time.After(30 * time.Second)
		for labelledRV == 0 {
			select {
			case ev := <-w.ResultChan():
				job, ok := ev.Object.(*batchv1.Job)
				if !ok || ev.Type == watch.Error {
					t.Fatalf("watch: %v", ev.Object)
				}
				_, labelled := job.Labels["kueue.x-k8s.io/queue-name"]
				if first {
					if ev.Type != watch.Added || labelled || job.Spec.Suspend == nil || !*job.Spec.Suspend {
						t.Fatalf("the Job was first stored %s with labels %v, suspend %v; want unlabelled and suspended",
							ev.Type, job.Labels, job.Spec.Suspend)
					}
					first = false
				}
				if labelled {
					labelledRV, _ = strconv.ParseInt(job.ResourceVersion, 10, 64)
					if !*job.Spec.Suspend {
						t.Fatal("the label came with the Job resumed: Kueue must be the one to admit it")
					}
				}
			case <-timeout:
				t.Fatal("no labelled Job seen within 30s")
			}
		}
		if svcRV == 0 || labelledRV <= svcRV {
			t.Fatalf("queue label at revision %d, Service created at %d: the label must come after the Service", labelledRV, svcRV)
		}

		// No quota left: Kueue made a Workload for it and keeps it suspended, with no pod. The Job
		// controller marks it Suspended once it has synced it, and from then on makes no pod.
		waitWorkload(t, dyn, ns, "ddp")
		poll(t, 30*time.Second, "the Job controller to mark ddp Suspended", jobCondition(ns, "ddp", batchv1.JobSuspended))
		if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=ddp"}); err != nil || len(pods.Items) != 0 {
			t.Fatalf("pods of a job not admitted: %d (%v)", len(pods.Items), err)
		}
		// Kueue's own reason, in its words; .status stays Pending, the table shows the reason.
		contains(t, tao(t, nil, "status", "ddp", "-n", ns), 0, "Queued", "queued in team-a: ", "insufficient unused quota for nvidia.com/gpu")
		r = tao(t, nil, "status", "ddp", "-n", ns, "-o", "json")
		var s struct{ Status, Reason, Message string }
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Status != "Pending" || s.Reason != "Queued" || !strings.Contains(s.Message, "16 more needed") {
			t.Fatalf("status -o json of the queued job: %+v (%v)\n%s", s, err, r)
		}
		contains(t, tao(t, nil, "list", "-n", ns), 0, "ddp", "Queued")
		// Where it waits and for what: the ClusterQueue's quota, all of it used by first. Kueue
		// writes the queues' status a moment after it admits, so this polls.
		const quota = "ClusterQueue cluster-queue: 16 of 16 nvidia.com/gpu used in flavor cluster-queue-gpu, the job needs 16"
		poll(t, 30*time.Second, "status to show the quota ddp waits for", func(context.Context) (bool, error) {
			return strings.Contains(tao(t, nil, "status", "ddp", "-n", ns, "-o", "json").stdout, quota), nil
		})
		r = tao(t, nil, "status", "ddp", "-n", ns, "-o", "json")
		var q struct {
			Queue struct {
				LocalQueue, ClusterQueue string
				GPUs                     int64
				Flavors                  []struct {
					Flavor        string
					Nominal, Used int64
				}
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &q); err != nil || q.Queue.LocalQueue != "team-a" || q.Queue.ClusterQueue != "cluster-queue" ||
			q.Queue.GPUs != 16 || len(q.Queue.Flavors) != 1 || q.Queue.Flavors[0].Nominal != 16 || q.Queue.Flavors[0].Used != 16 {
			t.Fatalf("status -o json .queue: %+v (%v)\n%s", q.Queue, err, r)
		}
		st := tao(t, nil, "status", "ddp", "-n", ns)
		contains(t, st, 0, quota)
		rep := tao(t, nil, "replicas", "ddp", "-n", ns)
		contains(t, rep, 0, "queued in team-a, not admitted yet", quota)
		dg := tao(t, nil, "diagnose", "ddp", "-n", ns)
		contains(t, dg, 0, "queued in team-a, not admitted yet", "kubectl describe localqueue team-a",
			"It is admitted once 16 more nvidia.com/gpu are free in flavor cluster-queue-gpu (16 of 16 used now)")
		capq := tao(t, nil, "capacity", "--queues")
		contains(t, capq, 0, "CLUSTERQUEUE", "cluster-queue-gpu")
		r = tao(t, nil, "capacity", "--queues", "-o", "json")
		var cr struct {
			Queues []struct {
				Name              string
				AdmittedWorkloads int32 `json:"admittedWorkloads"`
				Flavors           []struct{ Nominal, Used int64 }
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &cr); err != nil || len(cr.Queues) != 1 || cr.Queues[0].Name != "cluster-queue" ||
			cr.Queues[0].AdmittedWorkloads != 1 || len(cr.Queues[0].Flavors) != 1 || cr.Queues[0].Flavors[0].Used != 16 {
			t.Fatalf("capacity --queues -o json: %+v (%v)\n%s", cr, err, r)
		}
		// What docs/queues.md shows (`go test -v` prints it).
		for _, out := range []result{st, rep, dg, capq} {
			t.Logf("\n%s%s", out.stdout, out.stderr)
		}
		// wait keeps waiting for a queued job (only its --timeout ends it), and says once where it
		// waits.
		r = tao(t, nil, "wait", "ddp", "-n", ns, "--timeout", "3s", "--stuck-timeout", "1s")
		contains(t, r, 8)
		// ddp is the one workload pending in team-a (first's is admitted): position 1, 1-based,
		// as Kueue's visibility API says.
		if n := strings.Count(r.stderr, "queued in LocalQueue team-a"+positionAt(queuePositions(t), 1)+": waiting for Kueue to admit it"); n != 1 {
			t.Errorf("the queue said %d times, want once:\n%s", n, r)
		}

		// A third job queues behind; cancel removes it and the Workload Kueue made for it.
		contains(t, tao(t, nil, "submit", "third", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a",
			"--", "torchrun train.py"), 0, "job.batch/third created")
		third := waitWorkload(t, dyn, ns, "third")
		contains(t, tao(t, nil, "cancel", "third", "-n", ns), 0)
		poll(t, 60*time.Second, "third's Job and Workload to be gone", func(ctx context.Context) (bool, error) {
			_, err := client.BatchV1().Jobs(ns).Get(ctx, "third", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, ignoreNotFound(err)
			}
			wls, err := workloadsOf(ctx, dyn, ns, third.UID)
			return len(wls) == 0, err
		})
		if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=ddp"}); err != nil || len(pods.Items) != 0 {
			t.Fatalf("ddp has %d pods while first holds the quota (%v)", len(pods.Items), err)
		}

		// When first ends, Kueue admits ddp by itself; wait sees it through.
		contains(t, tao(t, nil, "wait", "ddp", "-n", ns, "--timeout", "120s"), 0, "Complete")
		firstJob, err := client.BatchV1().Jobs(ns).Get(ctx, "first", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ddp, err := client.BatchV1().Jobs(ns).Get(ctx, "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if firstJob.Status.Succeeded != 2 || ddp.Status.Succeeded != 2 {
			t.Fatalf("succeeded: first %d, ddp %d; want both ranks of each", firstJob.Status.Succeeded, ddp.Status.Succeeded)
		}
		if firstJob.Status.CompletionTime == nil || ddp.Status.StartTime == nil || ddp.Status.StartTime.Before(firstJob.Status.CompletionTime) {
			t.Fatalf("ddp started at %v, first completed at %v: ddp must start only once first's quota is free",
				ddp.Status.StartTime, firstJob.Status.CompletionTime)
		}
	})

	t.Run("queued jobs show their position, and move up as the jobs ahead are admitted", func(t *testing.T) {
		if !queuePositions(t) {
			t.Skip(noPositionsReason)
		}
		ctx := context.Background()
		// A 16-GPU ClusterQueue of its own behind two LocalQueues, so a job's place in its
		// LocalQueue and in the ClusterQueue differ: pa takes the quota, pb (team-p), pc (team-q)
		// and pd (team-p) queue behind it in that order.
		createClusterQueue(t, dyn, "pos-queue", 16)
		for _, lq := range []string{"team-p", "team-q"} {
			createKueueObject(t, dyn, "localqueues", ns, map[string]any{
				"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
				"metadata": map[string]any{"name": lq, "namespace": ns},
				"spec":     map[string]any{"clusterQueue": "pos-queue"},
			})
		}
		t.Cleanup(func() {
			removeQueued(t, dyn, ns, []string{"pa", "pb", "pc", "pd"}, []kueueObject{{"localqueues", ns, "team-p"}, {"localqueues", ns, "team-q"},
				{"clusterqueues", "", "pos-queue"}, {"resourceflavors", "", "pos-queue-gpu"}})
		})
		submit := func(name, queue string) {
			t.Helper()
			contains(t, tao(t, nil, "submit", name, "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", queue,
				"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "torchrun train.py"), 0, "job.batch/"+name+" created")
			waitWorkload(t, dyn, ns, name)
		}
		submit("pa", "team-p")
		poll(t, 30*time.Second, "Kueue to admit pa", runningPods(ns, "pa", 2))
		// Kueue orders a queue by creation time, in whole seconds: a second apart, the order is
		// the submits'.
		for _, j := range [][2]string{{"pb", "team-p"}, {"pc", "team-q"}, {"pd", "team-p"}} {
			time.Sleep(1100 * time.Millisecond)
			submit(j[0], j[1])
		}
		type positions struct{ local, cluster int32 }
		position := func(name string) (positions, bool) {
			var s struct {
				Reason string
				Queue  *struct {
					PositionInLocalQueue   *int32 `json:"positionInLocalQueue"`
					PositionInClusterQueue *int32 `json:"positionInClusterQueue"`
				}
			}
			r := tao(t, nil, "status", name, "-n", ns, "-o", "json")
			if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
				t.Fatalf("status %s -o json: %v\n%s", name, err, r)
			}
			if s.Reason != "Queued" || s.Queue == nil || s.Queue.PositionInLocalQueue == nil || s.Queue.PositionInClusterQueue == nil {
				return positions{}, false
			}
			return positions{*s.Queue.PositionInLocalQueue, *s.Queue.PositionInClusterQueue}, true
		}
		// Kueue's positions, 0-based: pb is next in both queues, pc first in team-q but second
		// in pos-queue, pd second in team-p and third in pos-queue.
		expect := func(want map[string]positions) {
			t.Helper()
			poll(t, 30*time.Second, fmt.Sprintf("the positions %v", want), func(context.Context) (bool, error) {
				for name, w := range want {
					if got, ok := position(name); !ok || got != w {
						return false, nil
					}
				}
				return true, nil
			})
		}
		expect(map[string]positions{"pb": {0, 0}, "pc": {0, 1}, "pd": {1, 2}})
		// Human output says them 1-based: STATUS in status and list, the counts in the message.
		var st result
		poll(t, 30*time.Second, "status to show pd's position among the pending counts", func(context.Context) (bool, error) {
			st = tao(t, nil, "status", "pd", "-n", ns)
			return strings.Contains(st.stdout, "position 2 of 2 pending in team-p, 3 of 3 in pos-queue, 1 admitted"), nil
		})
		contains(t, st, 0, "Queued:2")
		ls := tao(t, nil, "list", "-n", ns)
		for _, want := range []string{`(?m)^pa\s+Running\s`, `(?m)^pb\s+Queued:1\s`, `(?m)^pc\s+Queued:1\s`, `(?m)^pd\s+Queued:2\s`} {
			if !regexp.MustCompile(want).MatchString(ls.stdout) {
				t.Errorf("list: no line matching %s:\n%s", want, ls)
			}
		}
		t.Logf("\n%s%s\n%s%s", st.stdout, st.stderr, ls.stdout, ls.stderr)

		// pa ends (deleted once wait has said pd's position): Kueue admits pb, and the two left
		// move up. wait says pd's position once, then once when it changes (its Workload is read
		// again at least every 30 s).
		waiting := taoBackground(t, "wait", "pd", "-n", ns, "--timeout", "45s")
		waiting.waitStderr(t, 30*time.Second, "queued in LocalQueue team-p at position 2: waiting for Kueue to admit it")
		bg := metav1.DeletePropagationBackground
		if err := client.BatchV1().Jobs(ns).Delete(ctx, "pa", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		w := waiting.wait(t, time.Minute)
		contains(t, w, 8)
		if !strings.Contains(w.stderr, "queued in LocalQueue team-p at position 2: waiting for Kueue to admit it") ||
			strings.Count(w.stderr, "queued in LocalQueue team-p: now at position 1\n") != 1 || strings.Count(w.stderr, "queued in LocalQueue") != 2 {
			t.Errorf("wait's lines on pd's position:\n%s", w.stderr)
		}
		poll(t, 30*time.Second, "Kueue to admit pb", runningPods(ns, "pb", 2))
		expect(map[string]positions{"pc": {0, 0}, "pd": {0, 1}})
		t.Logf("\n%s", w.stderr)
	})

	t.Run("a job Kueue can never admit ends wait at once with exit code 13", func(t *testing.T) {
		ctx := context.Background()
		// A queue of its own: 8 GPUs, which "hold" takes; "never" queues behind it. Then the quota
		// shrinks below what "never" needs: Kueue will never admit it, and wait says so at once.
		createClusterQueue(t, dyn, "small-queue", 8)
		t.Cleanup(func() {
			removeQueued(t, dyn, ns, []string{"hold", "never"}, []kueueObject{{"clusterqueues", "", "small-queue"}, {"resourceflavors", "", "small-queue-gpu"}})
		})
		createKueueObject(t, dyn, "localqueues", ns, map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
			"metadata": map[string]any{"name": "team-b", "namespace": ns},
			"spec":     map[string]any{"clusterQueue": "small-queue"},
		})
		contains(t, tao(t, nil, "submit", "hold", "-n", ns, "--image", "img", "--gpus", "8", "--queue", "team-b",
			"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "sleep inf"), 0, "job.batch/hold created")
		poll(t, 30*time.Second, "Kueue to admit hold", runningPods(ns, "hold", 1))
		contains(t, tao(t, nil, "submit", "never", "-n", ns, "--image", "img", "--gpus", "8", "--queue", "team-b",
			"--", "true"), 0, "job.batch/never created")
		waitWorkload(t, dyn, ns, "never")
		patch := []byte(`[{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota","value":"4"}]`)
		if _, err := dyn.Resource(kueueResource("clusterqueues")).Patch(ctx, "small-queue", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r := tao(t, nil, "wait", "never", "-n", ns, "--stuck-timeout", "0")
		contains(t, r, 13, "Kueue will not admit the job: Inadmissible", "will not be admitted by Kueue",
			"ClusterQueue small-queue can hold at most 4")
		if r.stdout != "" {
			t.Errorf("stdout = %q, want nothing", r.stdout)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("wait took %s to see that Kueue will never admit the job", took)
		}
	})

	t.Run("a job behind a stopped ClusterQueue waits, is said to, and runs once the queue is resumed", func(t *testing.T) {
		ctx := context.Background()
		cqs := dyn.Resource(kueueResource("clusterqueues"))
		setStop := func(policy string) {
			t.Helper()
			patch := []byte(`{"spec":{"stopPolicy":"` + policy + `"}}`)
			if _, err := cqs.Patch(ctx, "cluster-queue", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// An admin stops cluster-queue (Hold: what it admitted runs on, nothing new is admitted);
		// the later subtests and the cleanup need it running again, even if this one fails.
		setStop("Hold")
		finished := false
		t.Cleanup(func() {
			setStop("None")
			// cancel leaves a finished job be (and its Workload, as first's and ddp's): only one
			// this subtest did not see through is removed.
			if !finished {
				removeQueued(t, dyn, ns, []string{"held"}, nil)
			}
		})
		contains(t, tao(t, nil, "submit", "held", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a",
			"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "torchrun train.py"), 0, "job.batch/held created")
		waitWorkload(t, dyn, ns, "held")

		// status: still Pending and Queued (the stop is an admin's, and temporary), the message
		// says first that the queue is stopped, and -o json carries the stop under .queue.
		const stopped = "ClusterQueue cluster-queue is stopped (Hold): nothing is admitted until an admin resumes it"
		r := tao(t, nil, "status", "held", "-n", ns, "-o", "json")
		var s struct {
			Status, Reason, Message string
			Queue                   struct {
				Stopped  []struct{ Kind, Name, StopPolicy string }
				Inactive *json.RawMessage
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Status != "Pending" || s.Reason != "Queued" ||
			!strings.HasPrefix(s.Message, "queued in team-a: "+stopped) || len(s.Queue.Stopped) != 1 ||
			s.Queue.Stopped[0] != (struct{ Kind, Name, StopPolicy string }{"ClusterQueue", "cluster-queue", "Hold"}) || s.Queue.Inactive != nil {
			t.Fatalf("status -o json of a job behind a stopped ClusterQueue: %+v (%v)\n%s", s, err, r)
		}
		st := tao(t, nil, "status", "held", "-n", ns)
		contains(t, st, 0, "Queued", "queued in team-a: "+stopped)
		// diagnose and replicas name the stop as what holds it, and the patch that resumes it.
		const resume = `kubectl patch clusterqueue cluster-queue --type merge -p '{"spec":{"stopPolicy":"None"}}'`
		dg := tao(t, nil, "diagnose", "held", "-n", ns)
		contains(t, dg, 0, "queued in team-a, not admitted yet: "+stopped, "an admin resumes ClusterQueue cluster-queue", resume)
		rep := tao(t, nil, "replicas", "held", "-n", ns)
		contains(t, rep, 0, "queued in team-a, not admitted yet: "+stopped)
		for _, out := range []result{st, rep, dg} {
			t.Logf("\n%s%s", out.stdout, out.stderr)
		}

		// wait goes on (no NotAdmitted: only its --timeout ends it) and says the stop once.
		r = tao(t, nil, "wait", "held", "-n", ns, "--timeout", "3s", "--stuck-timeout", "1s")
		contains(t, r, int(exitcode.Timeout), "timed out")
		if n := strings.Count(r.stderr, "queued in LocalQueue team-a"+positionAt(queuePositions(t), 1)+": "+stopped+"; still waiting"); n != 1 || strings.Count(r.stderr, "is stopped") != 1 {
			t.Errorf("the stop said %d times, want once:\n%s", n, r)
		}
		if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=held"}); err != nil || len(pods.Items) != 0 {
			t.Fatalf("held has %d pods while its ClusterQueue is stopped (%v)", len(pods.Items), err)
		}

		// Resumed, Kueue admits it by itself, both ranks at once, and it runs to the end.
		setStop("None")
		r = tao(t, nil, "wait", "held", "-n", ns, "--timeout", "120s")
		contains(t, r, 0, "Complete")
		job, err := client.BatchV1().Jobs(ns).Get(ctx, "held", metav1.GetOptions{})
		if err != nil || job.Status.Succeeded != 2 {
			t.Fatalf("held after the resume: %v (%v)", job.Status, err)
		}
		finished = true
	})

	t.Run("a flavor's node labels take the pods to the nodes of its GPU product", func(t *testing.T) {
		ctx := context.Background()
		const (
			h100    = "NVIDIA-H100-80GB-HBM3"
			a100    = "NVIDIA-A100-SXM4-80GB"
			product = "nvidia.com/gpu.product"
		)
		// Half the nodes become A100s (GPU Feature Discovery's labels of one); the end of the
		// subtest makes them all H100 again, as every later test expects.
		out, err := launcher(t, "relabel", "--product", "a100", "--product-nodes", "2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := launcher(t, "relabel", "--product-nodes", "0"); err != nil {
				t.Error(err)
			}
			nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "type=kwok"})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range nodes.Items {
				if n.Labels[product] != h100 {
					t.Errorf("node %s is left %s; later tests expect only %s", n.Name, n.Labels[product], h100)
				}
			}
		})
		productOf := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			node, p, _ := strings.Cut(line, "\t")
			productOf[node] = p
		}
		var a100Nodes []string
		for node, p := range productOf {
			if p == a100 {
				a100Nodes = append(a100Nodes, node)
			}
		}
		if len(a100Nodes) != 2 || len(productOf) < 4 {
			t.Fatalf("relabel made %v; want 2 of the (at least 4) simulated nodes A100", productOf)
		}
		// The plugin sees the mixed cluster as it is: capacity names each node's product, and
		// the capacity guard counts only the nodes a --node-selector picks.
		r := tao(t, nil, "capacity", "-o", "json")
		var capRep struct {
			Nodes []struct{ Name, Product string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &capRep); err != nil || len(capRep.Nodes) < len(productOf) {
			t.Fatalf("capacity -o json: %v\n%s", err, r)
		}
		for _, n := range capRep.Nodes {
			// The real node, when one runs, is not the launcher's to relabel.
			if p, ours := productOf[n.Name]; ours && n.Product != p {
				t.Errorf("capacity shows %s as %s, the launcher made it %s", n.Name, n.Product, productOf[n.Name])
			}
		}
		r = tao(t, nil, "submit", "too-many-a100", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "3",
			"--node-selector", product+"="+a100, "--", "true")
		contains(t, r, 7, "the job needs 24 nvidia.com/gpu (8 per node x 3 nodes) but only 16 are allocatable on the nodes matching --node-selector "+product+"="+a100)
		if _, err := client.BatchV1().Jobs(ns).Get(ctx, "too-many-a100", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a refused job was created (%v)", err)
		}

		// Two flavors, tried in order: the H100 one has no GPU quota, so a GPU job can only be
		// admitted to the A100 one, whose node labels Kueue puts on the pods.
		for name, p := range map[string]string{"e2e-h100": h100, "e2e-a100": a100} {
			createKueueObject(t, dyn, "resourceflavors", "", map[string]any{
				"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
				"metadata": map[string]any{"name": name},
				"spec":     map[string]any{"nodeLabels": map[string]any{product: p}},
			})
		}
		flavor := func(name, gpus string) map[string]any {
			return map[string]any{"name": name, "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "1000"},
				map[string]any{"name": "memory", "nominalQuota": "10Ti"},
				map[string]any{"name": "nvidia.com/gpu", "nominalQuota": gpus},
			}}
		}
		createKueueObject(t, dyn, "clusterqueues", "", map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
			"metadata": map[string]any{"name": "by-product"},
			"spec": map[string]any{
				"namespaceSelector": map[string]any{},
				"resourceGroups": []any{map[string]any{
					"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
					"flavors":          []any{flavor("e2e-h100", "0"), flavor("e2e-a100", "16")},
				}},
			},
		})
		createKueueObject(t, dyn, "localqueues", ns, map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
			"metadata": map[string]any{"name": "team-f", "namespace": ns},
			"spec":     map[string]any{"clusterQueue": "by-product"},
		})
		t.Cleanup(func() {
			removeQueued(t, dyn, ns, []string{"placed"}, []kueueObject{
				{"localqueues", ns, "team-f"}, {"clusterqueues", "", "by-product"},
				{"resourceflavors", "", "e2e-h100"}, {"resourceflavors", "", "e2e-a100"},
			})
		})

		// Neither preflight nor submit's quota check holds a flavor without GPUs against the
		// queue: the A100 flavor can hold the job.
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "team-f", "--gpus", "8", "--nodes", "2"), 0,
			"points at ClusterQueue by-product, whose quota can hold the job")
		contains(t, tao(t, nil, "submit", "placed", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-f",
			"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "torchrun train.py"), 0, "job.batch/placed created", "queued in LocalQueue team-f")
		poll(t, 60*time.Second, "Kueue to admit placed and both its ranks to run", runningPods(ns, "placed", 2))

		// Kueue admitted it to the A100 flavor...
		job := waitWorkload(t, dyn, ns, "placed")
		wls, err := workloadsOf(ctx, dyn, ns, job.UID)
		if err != nil || len(wls) != 1 {
			t.Fatalf("Workloads of placed: %d (%v)", len(wls), err)
		}
		assignments, _, _ := unstructured.NestedSlice(wls[0].Object, "status", "admission", "podSetAssignments")
		cq, _, _ := unstructured.NestedString(wls[0].Object, "status", "admission", "clusterQueue")
		if len(assignments) != 1 || cq != "by-product" {
			t.Fatalf("admission of placed: ClusterQueue %q, pod set assignments %v", cq, assignments)
		}
		flavors, _, _ := unstructured.NestedStringMap(assignments[0].(map[string]any), "flavors")
		if flavors["nvidia.com/gpu"] != "e2e-a100" {
			t.Fatalf("placed was admitted with flavors %v; want nvidia.com/gpu from e2e-a100", flavors)
		}
		// ...so every pod carries the flavor's node labels as its node selector and runs on an A100.
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=placed"})
		if err != nil || len(pods.Items) != 2 {
			t.Fatalf("pods of placed: %d (%v)", len(pods.Items), err)
		}
		ran := map[string]bool{}
		for _, p := range pods.Items {
			if got := p.Spec.NodeSelector[product]; got != a100 {
				t.Errorf("pod %s has node selector %v; want %s=%s from the flavor", p.Name, p.Spec.NodeSelector, product, a100)
			}
			if productOf[p.Spec.NodeName] != a100 {
				t.Errorf("pod %s runs on %q (%s), not on an A100 node %v", p.Name, p.Spec.NodeName, productOf[p.Spec.NodeName], a100Nodes)
			}
			ran[p.Spec.NodeName] = true
		}
		if len(ran) != 2 {
			t.Errorf("the two ranks share a node: %v", ran)
		}

		// What the plugin shows of the admitted job: running, no queue left to wait in, and the
		// ranks on the A100 nodes.
		r = tao(t, nil, "status", "placed", "-n", ns, "-o", "json")
		var st struct {
			Status, Reason string
			Ready          int32
			Queue          *json.RawMessage
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Status != "Running" || st.Reason != "" || st.Ready != 2 || st.Queue != nil {
			t.Fatalf("status -o json of the admitted job: %+v (%v)\n%s", st, err, r)
		}
		reps, _ := replicasUntil(t, ns, "placed", func(reps []replica) bool { return len(reps) == 2 })
		for _, rep := range reps {
			if productOf[rep.Node] != a100 || rep.Phase != "Running" {
				t.Errorf("replicas shows rank %d %s on %q; want Running on an A100 node %v", rep.Rank, rep.Phase, rep.Node, a100Nodes)
			}
		}
		t.Logf("\n%s", tao(t, nil, "replicas", "placed", "-n", ns).stdout)
	})

	t.Run("a higher WorkloadPriorityClass preempts a lower one, which is admitted again once room returns", func(t *testing.T) {
		ctx := context.Background()
		for name, value := range map[string]int64{"e2e-low": 10, "e2e-high": 1000} {
			createKueueObject(t, dyn, "workloadpriorityclasses", "", map[string]any{
				"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
				"metadata": map[string]any{"name": name}, "value": value,
			})
			t.Cleanup(func() {
				_ = dyn.Resource(kueueResource("workloadpriorityclasses")).Delete(ctx, name, metav1.DeleteOptions{})
			})
		}
		// A ClusterQueue of its own (16 GPUs) that preempts lower priorities within itself.
		createPreemptingClusterQueue(t, dyn, "preempting", "10Ti", "16")
		t.Cleanup(func() {
			_ = dyn.Resource(kueueResource("clusterqueues")).Delete(ctx, "preempting", metav1.DeleteOptions{})
		})
		createKueueObject(t, dyn, "localqueues", ns, map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
			"metadata": map[string]any{"name": "team-p", "namespace": ns},
			"spec":     map[string]any{"clusterQueue": "preempting"},
		})
		submit := func(name, class, duration string) {
			contains(t, tao(t, nil, "submit", name, "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-p",
				"--priority-class", class, "--annotation", "sim.kubectl-tao.dev/run-duration="+duration, "--", "torchrun train.py"), 0, "job.batch/"+name+" created")
		}
		submit("low", "e2e-low", "10m")
		poll(t, 30*time.Second, "Kueue to admit low and both its ranks to run", runningPods(ns, "low", 2))
		submit("high", "e2e-high", "2s")
		poll(t, 30*time.Second, "low to show Preempted", func(context.Context) (bool, error) {
			var s struct{ Reason string }
			err := json.Unmarshal([]byte(tao(t, nil, "status", "low", "-n", ns, "-o", "json").stdout), &s)
			return s.Reason == "Preempted", err
		})
		contains(t, tao(t, nil, "status", "low", "-n", ns), 0, "Preempted", "preempted and requeued in team-p")
		contains(t, tao(t, nil, "wait", "high", "-n", ns, "--timeout", "120s"), 0, "Complete")
		// Room again: Kueue admits low by itself, all ranks at once.
		poll(t, 60*time.Second, "Kueue to admit low again", runningPods(ns, "low", 2))
		contains(t, tao(t, nil, "cancel", "low", "-n", ns), 0)
	})

	t.Run("a preempted checkpointing job on the real node resumes after the checkpoint it saved on SIGTERM", func(t *testing.T) {
		preemptedCheckpointsResume(t, dyn, ns)
	})
}
