//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// kueueModule is the Kueue release whose CRDs the queue test applies. The module is only
// downloaded (go mod download), never added to go.mod: kubectl-tao reads Kueue's objects with
// the dynamic client.
const kueueModule = "sigs.k8s.io/kueue@v0.17.0"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// kueueCRD reads one of Kueue's real CRDs from the module cache.
func kueueCRD(t *testing.T, plural string) *unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", kueueModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s (the queue test needs Kueue's CRDs from the module proxy or cache): %v", kueueModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json %s: %v (%s)", kueueModule, err, out)
	}
	raw, err := os.ReadFile(filepath.Join(mod.Dir, "config/components/crd/bases/kueue.x-k8s.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// installKueueCRDs creates Kueue's LocalQueue CRD (the only Kueue resource kubectl-tao reads)
// and waits until it is served; the cleanup removes it, so that later tests (preflight's output)
// see a cluster without Kueue again. No Kueue controller runs: the test admits jobs itself.
// The Workload CRD is not applied: nothing here reads Workloads, and at 1.4 MB it is close to
// the API server's request limit.
func installKueueCRDs(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crd := kueueCRD(t, "localqueues")
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(crdGVR).Delete(ctx, crd.GetName(), metav1.DeleteOptions{})
		err := pollErr(60*time.Second, func(ctx context.Context) (bool, error) {
			_, err := client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2")
			return err != nil, nil
		})
		if err != nil {
			t.Errorf("Kueue's LocalQueue CRD still served after 60s: later tests may see Kueue installed")
		}
	})
	poll(t, 60*time.Second, "the LocalQueue CRD to be served", func(ctx context.Context) (bool, error) {
		list, err := client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2")
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == "localqueues" {
				return true, nil
			}
		}
		return false, nil
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

func createLocalQueue(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	lq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"clusterQueue": "cluster-queue"},
	}}
	gvr := schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(context.Background(), lq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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

	installKueueCRDs(t, dyn)
	ns := namespace(t)
	createLocalQueue(t, dyn, ns, "team-a")

	t.Run("missing LocalQueue is refused", func(t *testing.T) {
		r := tao(t, nil, "submit", "q", "-n", ns, "--image", "img", "--queue", "nope", "--", "true")
		contains(t, r, 3, `no LocalQueue "nope" in namespace `+ns, "LocalQueues there: team-a", "kubectl get localqueues -n "+ns)
		assertNoObjects(t, ns)
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "nope"), 11, `no LocalQueue "nope"`)
		contains(t, tao(t, nil, "preflight", "-n", ns, "--queue", "team-a"), 0, "LocalQueue team-a exists in namespace "+ns)
	})

	t.Run("queued job waits, labelled after its Service, and runs every rank once admitted", func(t *testing.T) {
		ctx := context.Background()
		// Watch the Job from before it exists, to see the order in which it changes.
		w, err := client.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=ddp"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		r := tao(t, nil, "submit", "ddp", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--queue", "team-a",
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

		// Not admitted: it stays suspended, no pod, and every command says why. The Job
		// controller marks it Suspended once it has synced it, and from then on makes no pod.
		poll(t, 30*time.Second, "the Job controller to mark ddp Suspended", jobCondition(ns, "ddp", batchv1.JobSuspended))
		if pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=ddp"}); err != nil || len(pods.Items) != 0 {
			t.Fatalf("pods of a job not admitted yet: %d (%v)", len(pods.Items), err)
		}
		contains(t, tao(t, nil, "status", "ddp", "-n", ns), 0, "Pending", "queued in team-a")
		contains(t, tao(t, nil, "list", "-n", ns), 0, "ddp", "Pending")
		contains(t, tao(t, nil, "diagnose", "ddp", "-n", ns), 0, "queued in team-a, not admitted yet", "kubectl describe localqueue team-a")

		// Admit it as Kueue does: resume it.
		patch := []byte(`{"spec":{"suspend":false}}`)
		if _, err := client.BatchV1().Jobs(ns).Patch(ctx, "ddp", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		contains(t, tao(t, nil, "wait", "ddp", "-n", ns, "--timeout", "90s"), 0, "Complete")
		job, err := client.BatchV1().Jobs(ns).Get(ctx, "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if job.Status.Succeeded != 2 || !strings.Contains(job.Labels["kueue.x-k8s.io/queue-name"], "team-a") {
			t.Fatalf("after admission: succeeded %d, labels %v; want both ranks done", job.Status.Succeeded, job.Labels)
		}
	})
}
