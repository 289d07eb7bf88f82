package preflightcheck

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/permissions"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// migRequest is pods ranks of gpus slices of the MIG profile 1g.10gb each.
func migRequest(gpus, pods int64) gpufit.Request {
	const slice = "nvidia.com/mig-1g.10gb"
	return gpufit.Request{Pods: pods, GPU: slice, PerPod: corev1.ResourceList{slice: *resource.NewQuantity(gpus, resource.DecimalSI)}}
}

func request(gpus, pods int64) gpufit.Request {
	return gpufit.Request{Pods: pods, PerPod: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}
}

func allowAll() []Review {
	var rs []Review
	for _, a := range permissions.Needed {
		rs = append(rs, Review{Access: a, Allowed: true})
	}
	return rs
}

// healthy is a cluster where everything passes for one 8-GPU rank.
func healthy() Facts {
	return Facts{
		Namespace: "ml",
		Version:   &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2"},
		Reviews:   allowAll(),
		Nodes:     []corev1.Node{fixture.Node("a").Label(LabelDriverMajor, "580").Label(LabelCUDAMajor, "13").Label(LabelCUDAMinor, "0").GPUs(8).Val(), fixture.Node("b").Label(LabelDriverMajor, "590").Label(LabelCUDAMajor, "13").Label(LabelCUDAMinor, "1").GPUs(8).Val()},
		Requested: map[string]corev1.ResourceList{},
		DaemonSets: []appsv1.DaemonSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator",
			Name: "nvidia-device-plugin-daemonset"}}},
		Exporters:    map[string]*corev1.Pod{"a": exporter("a"), "b": exporter("b")},
		ProxyAllowed: map[string]bool{"gpu-operator": true},
		Request:      request(8, 1),
	}
}

func exporter(node string) *corev1.Pod {
	return fixture.Pod("nvidia-dcgm-exporter-" + node).Namespace("gpu-operator").Node(node).Phase(corev1.PodRunning).Obj()
}

func byName(checks []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range checks {
		m[c.Name] = c
	}
	return m
}

var forbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no"))

func TestEvaluate(t *testing.T) {
	used := func(node string, gpus int64) map[string]corev1.ResourceList {
		return map[string]corev1.ResourceList{node: {jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}
	}
	tests := []struct {
		name   string
		edit   func(*Facts)
		check  string
		result Result
		want   []string
	}{
		{"healthy cluster", func(*Facts) {}, "fit", Pass, []string{"1 x 8 nvidia.com/gpu fits now", "2 such ranks", "16 free GPUs"}},
		{"version", func(*Facts) {}, "cluster", Pass, []string{"v1.37.2"}},
		{"unreachable", func(f *Facts) { f.VersionErr = errors.New("dial tcp: connection refused") }, "cluster", Fail, []string{"Could not reach the Kubernetes API server"}},
		{"unauthenticated", func(f *Facts) { f.VersionErr = apierrors.NewUnauthorized("bad token") }, "cluster", Fail, []string{"Could not authenticate to a Kubernetes cluster"}},
		{"namespace missing", func(f *Facts) {
			f.NamespaceErr = apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ml")
		}, "namespace", Fail, []string{"namespace ml does not exist", "kubectl create namespace ml"}},
		{"namespace unreadable", func(f *Facts) { f.NamespaceErr = forbidden }, "namespace", Warn, []string{"you may not get it"}},
		{"all permissions", func(*Facts) {}, "permissions", Pass, []string{"permissions kubectl tao needs in namespace ml are granted"}},
		{"a denied verb is named", func(f *Facts) {
			// By what they are, not where: permissions.Needed grows.
			for i, r := range f.Reviews {
				a := r.Access
				if a.Verb == "create" && a.Resource == "jobs" || a.Verb == "get" && a.Resource == "pods" && a.Subresource == "" && !a.Cluster {
					f.Reviews[i].Allowed = false
				}
			}
		}, "permissions", Fail,
			[]string{"you may not: create jobs.batch (submit), get pods (status)", "kubectl tao rbac -n ml"}},
		{"review error", func(f *Facts) { f.Reviews[1].Err = errors.New("boom") }, "permissions", Warn, []string{"patch jobs.batch (boom)"}},
		{"node reads denied", func(f *Facts) {
			for i := range f.Reviews {
				if f.Reviews[i].Access.Cluster {
					f.Reviews[i].Allowed = false
				}
			}
			f.NodesErr = forbidden
		}, "cluster-reads", Warn, []string{"list nodes", "capacity guard", "fit checks are skipped"}},
		{"no GPUs", func(f *Facts) { f.Nodes = []corev1.Node{fixture.Node("cpu").GPUs(0).Val()} }, "gpus", Fail, []string{gpufit.ErrNoGPUs.Error(), "GPU Operator"}},
		{"GPUs counted", func(*Facts) {}, "gpus", Pass, []string{"16 nvidia.com/gpu allocatable on 2 of 2 nodes"}},
		{"MIG slices counted", func(f *Facts) {
			f.Nodes = append(f.Nodes, fixture.Node("mig").Allocatable("nvidia.com/mig-1g.10gb", "7").Val())
			f.Request = migRequest(2, 1)
		}, "gpus", Pass, []string{"7 nvidia.com/mig-1g.10gb allocatable on 1 of 3 nodes"}},
		{"a GPU resource no node has", func(f *Facts) { f.Request = migRequest(1, 1) }, "gpus", Fail,
			[]string{"no node of the cluster advertises nvidia.com/mig-1g.10gb; the GPU resources it has are nvidia.com/gpu (16)", "--gpu-resource"}},
		{"MIG slices fit", func(f *Facts) {
			f.Nodes = append(f.Nodes, fixture.Node("mig").Allocatable("nvidia.com/mig-1g.10gb", "7").Val())
			f.Request = migRequest(7, 1)
		}, "fit", Pass, []string{"1 x 7 nvidia.com/mig-1g.10gb fits now: 1 such ranks fit on the 7 free nvidia.com/mig-1g.10gb"}},
		{"operator found", func(*Facts) {}, "gpu-operator", Pass, []string{"gpu-operator/nvidia-device-plugin-daemonset"}},
		{"GPU metrics readable everywhere", func(*Facts) {}, "gpu-metrics", Pass, []string{"GPU metrics: exporter on 2 of 2 GPU nodes, readable"}},
		{"GPU metrics on some nodes", func(f *Facts) { delete(f.Exporters, "b") }, "gpu-metrics", Warn,
			[]string{"exporter on 1 of 2 GPU nodes, readable", "nvidia-smi", "dcgmExporter.enabled=true"}},
		{"no exporter", func(f *Facts) { f.Exporters = nil }, "gpu-metrics", Warn, []string{"no dcgm-exporter on any of the 2 GPU nodes"}},
		{"exporter not readable", func(f *Facts) { f.ProxyAllowed = nil }, "gpu-metrics", Warn,
			[]string{"get on pods/proxy is denied in namespace gpu-operator", "kubectl tao rbac --gpu-metrics --gpu-metrics-namespace gpu-operator"}},
		{"exporters not looked for", func(f *Facts) { f.ExportersErr = forbidden }, "gpu-metrics", Warn, []string{"could not look for dcgm-exporter"}},
		{"operator by label", func(f *Facts) {
			f.DaemonSets = []appsv1.DaemonSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dp", Labels: map[string]string{"k8s-app": "nvidia-gpu-device-plugin"}}}}
		}, "gpu-operator", Pass, []string{"kube-system/dp"}},
		{"no operator", func(f *Facts) { f.DaemonSets = []appsv1.DaemonSet{{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"}}} }, "gpu-operator", Warn, []string{"no GPU Operator or NVIDIA device plugin", "gpu-operator/latest"}},
		{"daemonsets unreadable", func(f *Facts) { f.DaemonSetsErr = forbidden }, "gpu-operator", Warn, []string{"you may not list daemonsets"}},
		{"runtime ok", func(*Facts) {}, "node-runtime", Pass, []string{"all 2 GPU nodes have driver 580+ and CUDA 13.0+"}},
		{"unlabelled nodes named", func(f *Facts) {
			f.Nodes = append(f.Nodes, fixture.Node("bare-1").GPUs(8).Val(), fixture.Node("bare-0").GPUs(4).Val())
		}, "node-runtime", Warn,
			[]string{"2 of 4 GPU nodes carry no GPU Feature Discovery", "bare-0, bare-1"}},
		{"old driver on some", func(f *Facts) {
			f.Nodes[0] = fixture.Node("a").Label(LabelDriverMajor, "550").Label(LabelCUDAMajor, "12").Label(LabelCUDAMinor, "4").GPUs(8).Val()
		}, "node-runtime", Warn, []string{"1 of 2 GPU nodes are below driver 580+", "a (driver 550, CUDA 12.4)"}},
		{"old cuda on all", func(f *Facts) {
			f.Nodes = []corev1.Node{fixture.Node("a").Label(LabelDriverMajor, "580").Label(LabelCUDAMajor, "12").Label(LabelCUDAMinor, "9").GPUs(8).Val()}
		}, "node-runtime", Fail, []string{"no GPU node meets", "CUDA 12.9"}},
		{"selector limits the runtime check", func(f *Facts) {
			f.Nodes = append(f.Nodes, fixture.Node("old").Label(LabelDriverMajor, "470").Label(LabelCUDAMajor, "11").Label(LabelCUDAMinor, "0").GPUs(8).Val())
			f.Nodes[0].Labels["pool"] = "new"
			f.Request.Selector = labels.SelectorFromSet(labels.Set{"pool": "new"})
		}, "node-runtime", Pass, []string{"all 1 GPU nodes"}},
		{"runtime skipped on managed nodes", func(f *Facts) {
			f.Nodes[0] = fixture.Node("a").Label(LabelDriverMajor, "470").Label(LabelCUDAMajor, "11").Label(LabelCUDAMinor, "0").GPUs(8).Val()
			f.SkipNodeRuntime = true
		}, "node-runtime", Info, []string{"skipped: TAO_K8S_SKIP_NODE_RUNTIME_CHECK=1", "managed GPU nodes"}},
		{"runtime judged without the skip", func(f *Facts) {
			f.Nodes[0] = fixture.Node("a").Label(LabelDriverMajor, "470").Label(LabelCUDAMajor, "11").Label(LabelCUDAMinor, "0").GPUs(8).Val()
		}, "node-runtime", Warn, []string{"1 of 2 GPU nodes are below driver 580+"}},
		{"toolkit is info", func(*Facts) {}, "container-toolkit", Info, []string{"1.19.0", "not visible through the Kubernetes API"}},
		{"multi-node on new server", func(f *Facts) { f.Request = request(8, 2) }, "multi-node", Pass, []string{"1.28+"}},
		{"multi-node on old server", func(f *Facts) { f.Request = request(4, 2); f.Version = &version.Info{Major: "1", Minor: "27+"} }, "multi-node", Fail, []string{"Kubernetes 1.27 is too old"}},
		{"does not fit", func(f *Facts) { f.Request = request(8, 3) }, "fit", Fail, []string{"needs 24 nvidia.com/gpu (8 per node x 3 nodes) but only 16 are allocatable"}},
		{"fits when others finish", func(f *Facts) { f.Request = request(8, 2); f.Requested = used("a", 2) }, "fit", Warn,
			[]string{"2 x 8 nvidia.com/gpu fits when others finish: only 1 such ranks fit on the 14 free GPUs now (2 on allocatable)"}},
		{"--now makes it a failure", func(f *Facts) { f.Request = request(8, 2); f.Requested = used("b", 8); f.Now = true }, "fit", Fail, []string{"does not fit now (--now)"}},
		{"pods unreadable", func(f *Facts) { f.PodsErr = forbidden; f.Requested = nil }, "fit", Warn, []string{"free GPUs not checked"}},
		{"pull secret ok", func(f *Facts) {
			f.PullSecrets = []PullSecret{{Name: "ngc", Secret: &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson}}}
		}, "pull-secret", Pass, []string{"secret ngc is a kubernetes.io/dockerconfigjson"}},
		{"pull secret wrong type", func(f *Facts) {
			f.PullSecrets = []PullSecret{{Name: "ngc", Secret: &corev1.Secret{Type: corev1.SecretTypeOpaque}}}
		}, "pull-secret", Fail, []string{"of type Opaque"}},
		{"pull secret missing", func(f *Facts) {
			f.PullSecrets = []PullSecret{{Name: "ngc", Err: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "ngc")}}
		}, "pull-secret", Fail, []string{"secret ngc not found in namespace ml", "create-pull-secret ngc"}},
		{"queue exists", func(f *Facts) { f.Queue, f.KueueVersion, f.Queues = "team-a", "v1beta2", []string{"team-a", "team-b"} }, "queue", Pass,
			[]string{"LocalQueue team-a exists in namespace ml (kueue.x-k8s.io/v1beta2)"}},
		{"queue missing", func(f *Facts) { f.Queue, f.KueueVersion, f.Queues = "team-a", "v1beta2", []string{"team-b"} }, "queue", Fail,
			[]string{`no LocalQueue "team-a" in namespace ml`, "LocalQueues there: team-b", "kubectl get localqueues -n ml", "ClusterQueue"}},
		{"queue given, Kueue not installed", func(f *Facts) { f.Queue = "team-a" }, "queue", Fail,
			[]string{"Kueue is not installed", "suspended forever", "kueue.sigs.k8s.io/docs/installation", "without --queue"}},
		{"queues unreadable", func(f *Facts) { f.Queue, f.KueueVersion, f.QueuesErr = "team-a", "v1beta2", forbidden }, "queue", Warn,
			[]string{"you may not list LocalQueues in namespace ml", "kubectl tao rbac -n ml"}},
		{"discovery failed", func(f *Facts) { f.Queue, f.KueueErr = "team-a", errors.New("timeout") }, "queue", Warn,
			[]string{"could not check that Kueue is installed: timeout", "kubectl api-resources --api-group=kueue.x-k8s.io"}},
		{"no --queue, Kueue installed: queues listed", func(f *Facts) { f.KueueVersion, f.Queues = "v1beta2", []string{"a", "b"} }, "queue", Pass,
			[]string{"Kueue is installed; LocalQueues in namespace ml: a, b"}},
		{"no --queue, no queue here", func(f *Facts) { f.KueueVersion = "v1beta1" }, "queue", Pass, []string{"LocalQueues in namespace ml: none"}},
		{"no --queue for a multi-node job where Kueue is installed", func(f *Facts) {
			f.KueueVersion, f.Queues, f.Request = "v1beta2", []string{"team-a"}, request(8, 2)
		}, "queue", Warn, []string{"a 2-node job without --queue on a cluster with Kueue", "LocalQueues in namespace ml: team-a", "--queue NAME"}},
		{"queue and its ClusterQueue", func(f *Facts) {
			f.Queue, f.KueueVersion, f.Queues, f.ClusterQueue = "team-a", "v1beta2", []string{"team-a"}, "gpu-cq"
		}, "queue", Pass, []string{"LocalQueue team-a exists in namespace ml (kueue.x-k8s.io/v1beta2) and points at ClusterQueue gpu-cq, whose quota can hold the job"}},
		{"queue whose ClusterQueue is missing or too small", func(f *Facts) {
			f.Queue, f.KueueVersion, f.Queues, f.ClusterQueue = "team-a", "v1beta2", []string{"team-a"}, "gone"
			f.NeverFits = "LocalQueue team-a points at ClusterQueue gone, which does not exist"
		}, "queue", Fail, []string{"LocalQueue team-a exists in namespace ml, but Kueue would never admit the job: LocalQueue team-a points at ClusterQueue gone", "capacity --queues"}},
		{"queue whose ClusterQueue cannot be read", func(f *Facts) {
			f.Queue, f.KueueVersion, f.Queues, f.ClusterQueueErr = "team-a", "v1beta2", []string{"team-a"}, forbidden
		}, "queue", Warn, []string{"its ClusterQueue could not be read (Forbidden), so its quota is not checked"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.edit(&f)
			checks := Evaluate(f)
			c, ok := byName(checks)[tc.check]
			if !ok {
				t.Fatalf("no %q check in %+v", tc.check, checks)
			}
			if c.Result != tc.result {
				t.Fatalf("%s = %s (%s), want %s", tc.check, c.Result, c.Message, tc.result)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.Message+" | "+c.Fix, w) {
					t.Errorf("%s: %q | %q lacks %q", tc.check, c.Message, c.Fix, w)
				}
			}
			if (c.Result == Pass) != (c.Fix == "") {
				t.Errorf("%s %s has fix %q: a fix is given exactly when not PASS", tc.check, c.Result, c.Fix)
			}
		})
	}
}

func TestEvaluateHealthyHasNoFailure(t *testing.T) {
	checks := Evaluate(healthy())
	if Failed(checks) {
		t.Fatalf("healthy cluster failed: %+v", checks)
	}
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
	}
	want := "cluster namespace permissions cluster-reads gpus gpu-operator gpu-metrics node-runtime container-toolkit fit"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("checks %q, want %q", got, want)
	}
}

func TestUnreachableIsTheOnlyLine(t *testing.T) {
	f := healthy()
	f.VersionErr = errors.New("refused")
	if checks := Evaluate(f); len(checks) != 1 || !Failed(checks) {
		t.Fatalf("got %+v, want one failing cluster check", checks)
	}
}

func TestNodesUnreadableSkipsGPUChecks(t *testing.T) {
	f := healthy()
	f.NodesErr = forbidden
	m := byName(Evaluate(f))
	for _, n := range []string{"gpus", "gpu-operator", "node-runtime", "fit"} {
		if _, ok := m[n]; ok {
			t.Errorf("check %s ran without nodes", n)
		}
	}
}

// Without --queue, a cluster without Kueue (or where Kueue cannot be read) shows no queue line:
// most clusters have no queue and need not hear about it.
func TestQueueLineOnlyWhenItSaysSomething(t *testing.T) {
	for name, edit := range map[string]func(*Facts){
		"no Kueue":          func(*Facts) {},
		"discovery failed":  func(f *Facts) { f.KueueErr = errors.New("boom") },
		"queues unreadable": func(f *Facts) { f.KueueVersion, f.QueuesErr = "v1beta2", forbidden },
	} {
		f := healthy()
		edit(&f)
		if c, ok := byName(Evaluate(f))["queue"]; ok {
			t.Errorf("%s: unexpected queue line %+v", name, c)
		}
	}
	f := healthy()
	f.Reviews = append(f.Reviews, Review{Access: permissions.Access{Verb: "list", Group: "kueue.x-k8s.io", Resource: "localqueues", Optional: true}})
	if c := byName(Evaluate(f))["cluster-reads"]; c.Result != Pass {
		t.Errorf("a denied localqueues read is not a cluster read: %+v", c)
	}
}
