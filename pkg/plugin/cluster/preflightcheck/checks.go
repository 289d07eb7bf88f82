// Package preflightcheck is what a first job needs, for `kubectl tao preflight`: Gather reads
// the cluster (version, access reviews, nodes, GPU daemonsets, pull secrets, Kueue) into Facts,
// and Evaluate, a pure core, judges them as PASS, INFO, WARN or FAIL checks, each with its fix.
// It reads no environment: the command fills in what the defaults file did and whether
// EnvSkipNodeRuntimeCheck is set.
package preflightcheck

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/permissions"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
)

// Result is a check's outcome. INFO is for what cannot be checked through the API.
type Result string

// The outcomes, worst last.
const (
	Pass Result = "PASS"
	Info Result = "INFO"
	Warn Result = "WARN"
	Fail Result = "FAIL"
)

// Check is one line of the report; the JSON names are a contract with scripts.
type Check struct {
	Name    string `json:"name"`
	Result  Result `json:"result"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// Minimums the contract sets for the nodes.
const (
	MinDriverMajor    = 580
	MinCUDAMajor      = 13
	MinCUDAMinor      = 0
	MinToolkit        = "1.19.0"
	MinMultiNodeMinor = 28 // Kubernetes 1.28: the pod index label the rendezvous relies on
)

// GFD labels that show what a node runs.
const (
	LabelDriverMajor = "nvidia.com/cuda.driver-version.major"
	LabelCUDAMajor   = "nvidia.com/cuda.runtime-version.major"
	LabelCUDAMinor   = "nvidia.com/cuda.runtime-version.minor"
)

// Review is the answer to one SelfSubjectAccessReview.
type Review struct {
	Access  permissions.Access
	Allowed bool
	Err     error
}

// Facts are everything preflight read; Evaluate turns them into checks without the API.
type Facts struct {
	Namespace string

	Version    *version.Info
	VersionErr error

	NamespaceErr error

	Reviews []Review

	Nodes    []corev1.Node
	NodesErr error
	// Requested per node by pods that have not ended; nil with PodsErr when they could not be read.
	Requested map[string]corev1.ResourceList
	PodsErr   error

	DaemonSets    []appsv1.DaemonSet
	DaemonSetsErr error

	// PullSecrets are the --image-pull-secret Secrets, in flag order.
	PullSecrets []PullSecret

	// Queue is --queue, "" when not given. KueueVersion is the kueue.x-k8s.io version that
	// serves LocalQueues, "" when Kueue is not installed (KueueErr: discovery failed). Queues are
	// the namespace's LocalQueues (QueuesErr: they could not be listed).
	Queue        string
	KueueVersion string
	KueueErr     error
	Queues       []string
	QueuesErr    error
	// ClusterQueue is the ClusterQueue that LocalQueue Queue points at, and NeverFits why it
	// cannot hold the job (a missing ClusterQueue included; "" when it can); ClusterQueueErr:
	// they could not be read. Read only when Queue exists.
	ClusterQueue    string
	NeverFits       string
	ClusterQueueErr error

	// Request is the job to fit; Nodes the --nodes asked (Request.Pods), Now the --now flag.
	Request gpufit.Request
	Now     bool

	// Defaults is what the defaults file did to the flags.
	Defaults DefaultsFile

	// Exporters are dcgm-exporter's running pods by node (ExportersErr: they could not be
	// looked for), and ProxyAllowed whether get on pods/proxy is allowed in each of their
	// namespaces: what top needs to read GPU numbers without exec.
	Exporters    map[string]*corev1.Pod
	ExportersErr error
	ProxyAllowed map[string]bool

	// SkipNodeRuntime is EnvSkipNodeRuntimeCheck set: the node-runtime check reports it was
	// skipped instead of judging the nodes.
	SkipNodeRuntime bool
}

// EnvSkipNodeRuntimeCheck, set to 1, skips the node-runtime check, as it does in the TAO SDK: on
// managed GPU nodes the provider owns the driver and toolkit, and their labels may say nothing.
const EnvSkipNodeRuntimeCheck = "TAO_K8S_SKIP_NODE_RUNTIME_CHECK"

// PullSecret is one --image-pull-secret as read: Secret, or Err.
type PullSecret struct {
	Name   string
	Secret *corev1.Secret
	Err    error
}

// DefaultsFile is what preflight made of the user's defaults file: Path is "" when there is
// none; Applied are the flags it set here; Err is why submit would refuse it. EnvVar is the
// environment variable that points at another file, named in the fix.
type DefaultsFile struct {
	Path    string
	Applied []string
	Err     error
	EnvVar  string
}

// Evaluate runs every check. An unreachable cluster is the only line: nothing else can be known.
func Evaluate(f Facts) []Check {
	var checks []Check
	if c, ok := defaultsCheck(f.Defaults); ok {
		checks = append(checks, c)
	}
	if f.VersionErr != nil {
		return append(checks, clusterCheck(f))
	}
	checks = append(checks, clusterCheck(f), namespaceCheck(f), permissionsCheck(f), readsCheck(f))
	if f.NodesErr == nil {
		checks = append(checks, gpuCheck(f), operatorCheck(f), gpuMetricsCheck(f), runtimeCheck(f))
	}
	checks = append(checks, toolkitCheck())
	if f.Request.Pods > 1 {
		checks = append(checks, multiNodeCheck(f))
	}
	if f.NodesErr == nil && f.Request.GPUsPerPod() > 0 {
		checks = append(checks, fitCheck(f))
	}
	for _, p := range f.PullSecrets {
		checks = append(checks, pullSecretCheck(f.Namespace, p))
	}
	if c, ok := queueCheck(f); ok {
		checks = append(checks, c)
	}
	return checks
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Result == Fail {
			return true
		}
	}
	return false
}

// defaultsCheck reports the defaults file, when there is one or one was named and is missing.
func defaultsCheck(d DefaultsFile) (Check, bool) {
	c := Check{Name: "defaults file"}
	switch {
	case d.Err != nil:
		c.Result, c.Message = Fail, "submit would refuse it: "+d.Err.Error()
		c.Fix = "correct the file (`kubectl tao config view` checks it), or point $" + d.EnvVar + " at another"
	case d.Path == "":
		return c, false
	case len(d.Applied) == 0:
		c.Result, c.Message = Pass, d.Path+" is valid; it sets none of the flags checked here that the command line left out"
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("%s is valid; checked here with its --%s", d.Path, strings.Join(d.Applied, ", --"))
	}
	return c, true
}

const fixKubeconfig = "check that `kubectl get nodes` works with the same --kubeconfig/--context, or set $KUBECONFIG"

func clusterCheck(f Facts) Check {
	c := Check{Name: "cluster"}
	if err := f.VersionErr; err != nil {
		c.Result, c.Fix = Fail, fixKubeconfig
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			c.Message = "Could not authenticate to a Kubernetes cluster: " + err.Error()
		} else {
			c.Message = "Could not reach the Kubernetes API server: " + err.Error()
		}
		return c
	}
	c.Result, c.Message = Pass, "reachable and authenticated, Kubernetes "+f.Version.GitVersion
	return c
}

func namespaceCheck(f Facts) Check {
	c := Check{Name: "namespace"}
	switch err := f.NamespaceErr; {
	case err == nil:
		c.Result, c.Message = Pass, fmt.Sprintf("namespace %s exists", f.Namespace)
	case apierrors.IsNotFound(err):
		c.Result, c.Message = Fail, fmt.Sprintf("namespace %s does not exist", f.Namespace)
		c.Fix = fmt.Sprintf("kubectl create namespace %s, or pick another with -n", f.Namespace)
	case apierrors.IsForbidden(err):
		c.Result, c.Message = Warn, fmt.Sprintf("cannot tell whether namespace %s exists: you may not get it", f.Namespace)
		c.Fix = "ask an admin to apply `kubectl tao rbac` for you (it grants get on the namespace)"
	default:
		c.Result, c.Message = Fail, fmt.Sprintf("reading namespace %s: %v", f.Namespace, err)
	}
	return c
}

// permissionsCheck names every namespaced verb the user lacks: each one breaks a command.
func permissionsCheck(f Facts) Check {
	c := Check{Name: "permissions"}
	var denied, unknown []string
	n := 0
	for _, r := range f.Reviews {
		if r.Access.Optional {
			continue
		}
		n++
		switch {
		case r.Err != nil:
			unknown = append(unknown, fmt.Sprintf("%s (%v)", r.Access, r.Err))
		case !r.Allowed:
			denied = append(denied, fmt.Sprintf("%s (%s)", r.Access, r.Access.For))
		}
	}
	switch {
	case len(denied) > 0:
		c.Result = Fail
		c.Message = fmt.Sprintf("in namespace %s you may not: %s", f.Namespace, strings.Join(denied, ", "))
		c.Fix = fmt.Sprintf("ask an admin to run `kubectl tao rbac -n %s --user YOU | kubectl apply -f -`", f.Namespace)
	case len(unknown) > 0:
		c.Result = Warn
		c.Message = "could not check: " + strings.Join(unknown, ", ")
		c.Fix = "kubectl auth can-i --list -n " + f.Namespace
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("all %d permissions kubectl tao needs in namespace %s are granted", n, f.Namespace)
	}
	return c
}

// readsCheck names the optional reads denied (node, cluster-wide pod and daemonset lists): each
// only degrades a check. Nodes matter most: without them the GPU checks are skipped.
func readsCheck(f Facts) Check {
	c := Check{Name: "cluster-reads"}
	var denied []string
	for _, r := range f.Reviews {
		// The namespace and Kueue's queues are reported by their own checks.
		if r.Access.Optional && r.Err == nil && !r.Allowed && r.Access.Resource != "namespaces" && r.Access.Group != kueue.Group {
			denied = append(denied, fmt.Sprintf("%s (%s)", r.Access, r.Access.For))
		}
	}
	switch {
	case apierrors.IsForbidden(f.NodesErr) || len(denied) > 0:
		c.Result = Warn
		c.Message = "you may not: " + strings.Join(denied, ", ")
		if f.NodesErr != nil {
			c.Message += "; so the GPU, runtime and fit checks are skipped, submit skips its capacity guard and `kubectl tao capacity` fails"
		}
		c.Fix = "ask an admin to apply the ClusterRole and ClusterRoleBinding of `kubectl tao rbac`"
	case f.NodesErr != nil:
		c.Result, c.Message = Warn, "listing nodes failed, GPU checks skipped: "+f.NodesErr.Error()
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("nodes (%d), pods and daemonsets of all namespaces are readable", len(f.Nodes))
	}
	return c
}

const operatorHint = "install the NVIDIA GPU Operator: https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html"

func gpuCheck(f Facts) Check {
	c := Check{Name: "gpus"}
	gpu := f.Request.GPUName()
	var gpus int64
	var nodes int
	for i := range f.Nodes {
		q := f.Nodes[i].Status.Allocatable[gpu]
		if v := q.Value(); v > 0 {
			gpus += v
			nodes++
		}
	}
	if gpus == 0 {
		// The fit check's own words: no GPU at all, or the GPU resources the nodes do have.
		one := gpufit.Request{Pods: 1, GPU: gpu, PerPod: corev1.ResourceList{gpu: *resource.NewQuantity(1, resource.DecimalSI)}}
		err := gpufit.Check(gpufit.Summarize(f.Nodes, one), one)
		c.Result, c.Message, c.Fix = Fail, err.Error(), operatorHint
		if !errors.Is(err, gpufit.ErrNoGPUs) {
			c.Fix = "pass --gpu-resource one of the GPU resources the nodes advertise"
		}
		return c
	}
	c.Result, c.Message = Pass, fmt.Sprintf("%d %s allocatable on %d of %d nodes", gpus, gpu, nodes, len(f.Nodes))
	return c
}

// IsGPUOperator reports whether a DaemonSet looks like the GPU Operator's or a device plugin's,
// by name or by the usual app labels.
func IsGPUOperator(ds *appsv1.DaemonSet) bool {
	names := []string{ds.Name, ds.Labels["app"], ds.Labels["app.kubernetes.io/name"], ds.Labels["app.kubernetes.io/part-of"], ds.Labels["k8s-app"]}
	for _, n := range names {
		n = strings.ToLower(n)
		if strings.Contains(n, "gpu-operator") || strings.Contains(n, "nvidia-device-plugin") ||
			(strings.Contains(n, "device-plugin") && (strings.Contains(n, "nvidia") || strings.Contains(n, "gpu"))) {
			return true
		}
	}
	return false
}

func operatorCheck(f Facts) Check {
	c := Check{Name: "gpu-operator"}
	if f.DaemonSetsErr != nil {
		c.Result, c.Message = Warn, "could not look for the GPU Operator or device plugin: "+f.DaemonSetsErr.Error()
		if apierrors.IsForbidden(f.DaemonSetsErr) {
			c.Message = "could not look for the GPU Operator or device plugin: you may not list daemonsets in all namespaces"
		}
		c.Fix = "kubectl get daemonsets -A | grep -i -e gpu-operator -e device-plugin"
		return c
	}
	var found []string
	for i := range f.DaemonSets {
		if ds := &f.DaemonSets[i]; IsGPUOperator(ds) {
			found = append(found, ds.Namespace+"/"+ds.Name)
		}
	}
	if len(found) == 0 {
		c.Result = Warn
		c.Message = "no GPU Operator or NVIDIA device plugin DaemonSet found in any namespace (nodes may advertise GPUs some other way)"
		c.Fix = operatorHint
		return c
	}
	sort.Strings(found)
	c.Result, c.Message = Pass, "found daemonset "+strings.Join(found, ", ")
	return c
}

// selected is the GPU nodes a job with r could land on, by selector.
func selected(nodes []corev1.Node, r gpufit.Request) []*corev1.Node {
	sel := r.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	var out []*corev1.Node
	for i := range nodes {
		n := &nodes[i]
		q := n.Status.Allocatable[r.GPUName()]
		if q.Value() > 0 && sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return out
}

// runtimeCheck compares GFD's driver and CUDA labels with the minimums on the GPU nodes the job
// could use. Some nodes below: WARN (pin with --node-selector); all of them: FAIL.
func runtimeCheck(f Facts) Check {
	c := Check{Name: "node-runtime"}
	if f.SkipNodeRuntime {
		c.Result = Info
		c.Message = "skipped: " + EnvSkipNodeRuntimeCheck + "=1 says the GPU nodes' driver and CUDA are the provider's (managed GPU nodes)"
		c.Fix = "unset " + EnvSkipNodeRuntimeCheck + " to check driver " + strconv.Itoa(MinDriverMajor) + "+ and CUDA " +
			strconv.Itoa(MinCUDAMajor) + "." + strconv.Itoa(MinCUDAMinor) + "+ on the nodes"
		return c
	}
	nodes := selected(f.Nodes, f.Request)
	var unlabelled, old []string
	for _, n := range nodes {
		drv, okD := atoi(n.Labels[LabelDriverMajor])
		cmaj, okM := atoi(n.Labels[LabelCUDAMajor])
		cmin, okm := atoi(n.Labels[LabelCUDAMinor])
		switch {
		case !okD || !okM || !okm:
			unlabelled = append(unlabelled, n.Name)
		case drv < MinDriverMajor || cmaj < MinCUDAMajor || (cmaj == MinCUDAMajor && cmin < MinCUDAMinor):
			old = append(old, fmt.Sprintf("%s (driver %d, CUDA %d.%d)", n.Name, drv, cmaj, cmin))
		}
	}
	need := fmt.Sprintf("driver %d+ and CUDA %d.%d+", MinDriverMajor, MinCUDAMajor, MinCUDAMinor)
	switch {
	case len(nodes) == 0:
		c.Result, c.Message = Pass, "no GPU nodes to check"
	case len(old) == len(nodes):
		c.Result = Fail
		c.Message = fmt.Sprintf("no GPU node meets %s: %s", need, names(old))
		c.Fix = "upgrade the NVIDIA driver (GPU Operator driver version) on the GPU nodes"
	case len(old) > 0:
		c.Result = Warn
		c.Message = fmt.Sprintf("%d of %d GPU nodes are below %s: %s", len(old), len(nodes), need, names(old))
		c.Fix = "upgrade them, or keep jobs off them with --node-selector"
	case len(unlabelled) > 0:
		c.Result = Warn
		c.Message = fmt.Sprintf("%d of %d GPU nodes carry no GPU Feature Discovery driver/CUDA labels (%s), so their driver and CUDA versions are unknown: %s",
			len(unlabelled), len(nodes), LabelDriverMajor, names(unlabelled))
		c.Fix = "enable GPU Feature Discovery (part of the GPU Operator), or check with nvidia-smi on those nodes (" + need + ")"
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("all %d GPU nodes have %s (GPU Feature Discovery labels)", len(nodes), need)
	}
	return c
}

func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n, err == nil
}

// names lists at most five, then says how many more.
func names(list []string) string {
	sort.Strings(list)
	if len(list) <= 5 {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:5], ", "), len(list)-5)
}

func toolkitCheck() Check {
	return Check{
		Name:    "container-toolkit",
		Result:  Info,
		Message: "the NVIDIA Container Toolkit version (" + MinToolkit + "+ needed) is not visible through the Kubernetes API",
		Fix:     "on a GPU node run `nvidia-ctk --version` (or `nvidia-container-cli --version`)",
	}
}

func multiNodeCheck(f Facts) Check {
	c := Check{Name: "multi-node"}
	major, okM := atoi(f.Version.Major)
	minor, okm := atoi(strings.TrimRight(f.Version.Minor, "+"))
	// Some distributions leave major and minor empty; the git version still says.
	if v, err := utilversion.ParseGeneric(f.Version.GitVersion); (!okM || !okm) && err == nil {
		major, minor, okM, okm = int(v.Major()), int(v.Minor()), true, true
	}
	switch {
	case !okM || !okm:
		c.Result, c.Message = Warn, fmt.Sprintf("cannot read the server version %q.%q; multi-node jobs need Kubernetes 1.%d+", f.Version.Major, f.Version.Minor, MinMultiNodeMinor)
	case major > 1 || minor >= MinMultiNodeMinor:
		c.Result, c.Message = Pass, fmt.Sprintf("Kubernetes %d.%d supports multi-node jobs (1.%d+: the pod index label)", major, minor, MinMultiNodeMinor)
	default:
		c.Result = Fail
		c.Message = fmt.Sprintf("Kubernetes %d.%d is too old for multi-node jobs: 1.%d+ sets the pod index label the rendezvous relies on", major, minor, MinMultiNodeMinor)
		c.Fix = fmt.Sprintf("upgrade the cluster to 1.%d+, or run on one node (--nodes 1)", MinMultiNodeMinor)
	}
	return c
}

// fitCheck: never fits on allocatable is a FAIL; fits there but not on what is free now is a
// WARN, or a FAIL with --now.
func fitCheck(f Facts) Check {
	c := Check{Name: "fit"}
	r := f.Request
	shape := fmt.Sprintf("%d x %d %s", r.Pods, r.GPUsPerPod(), r.GPUName())
	all := gpufit.Summarize(f.Nodes, r)
	if err := gpufit.Check(all, r); err != nil {
		c.Result, c.Message = Fail, err.Error()
		c.Fix = "lower --gpus or --nodes or what each rank asks (--cpu, --memory, --shm-size, --resource), or add GPU nodes"
		if errors.Is(err, gpufit.ErrNoGPUs) {
			c.Fix = operatorHint
		}
		return c
	}
	if f.PodsErr != nil {
		c.Result = Warn
		c.Message = fmt.Sprintf("%s fits on allocatable GPUs (%d such ranks); free GPUs not checked: listing pods failed: %v", shape, all.PodsThatFit, f.PodsErr)
		c.Fix = "ask an admin for list on pods in all namespaces (the ClusterRole of `kubectl tao rbac`)"
		return c
	}
	free := gpufit.SummarizeFree(f.Nodes, f.Requested, r)
	unit := gpufit.Unit(r.GPUName())
	if free.PodsThatFit >= r.Pods {
		c.Result = Pass
		c.Message = fmt.Sprintf("%s fits now: %d such ranks fit on the %d free %s (%d on allocatable)", shape, free.PodsThatFit, free.TotalGPUs, unit, all.PodsThatFit)
		return c
	}
	c.Result = Warn
	c.Message = fmt.Sprintf("%s fits when others finish: only %d such ranks fit on the %d free %s now (%d on allocatable), the pods will wait Pending",
		shape, free.PodsThatFit, free.TotalGPUs, unit, all.PodsThatFit)
	c.Fix = "see `kubectl tao capacity`; wait, or lower --gpus/--nodes"
	if f.Now {
		c.Result = Fail
		c.Message = strings.Replace(c.Message, "fits when others finish", "does not fit now (--now)", 1)
	}
	return c
}

func pullSecretCheck(ns string, p PullSecret) Check {
	c := Check{Name: "pull-secret"}
	name := p.Name
	switch err := p.Err; {
	case apierrors.IsNotFound(err):
		c.Result, c.Message = Fail, fmt.Sprintf("secret %s not found in namespace %s", name, ns)
		c.Fix = fmt.Sprintf("NGC_KEY=... kubectl tao create-pull-secret %s -n %s (or pipe the key with --from-stdin)", name, ns)
	case apierrors.IsForbidden(err):
		c.Result, c.Message = Warn, fmt.Sprintf("cannot read secret %s: you may not get secrets (the kubelet still can)", name)
	case err != nil:
		c.Result, c.Message = Fail, fmt.Sprintf("reading secret %s: %v", name, err)
	case p.Secret.Type != corev1.SecretTypeDockerConfigJson:
		c.Result = Fail
		c.Message = fmt.Sprintf("secret %s is of type %s, not %s: the kubelet ignores it for image pulls", name, p.Secret.Type, corev1.SecretTypeDockerConfigJson)
		c.Fix = fmt.Sprintf("recreate it: kubectl tao create-pull-secret %s --overwrite", name)
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("secret %s is a %s secret", name, corev1.SecretTypeDockerConfigJson)
	}
	return c
}

// queueCheck is about Kueue: with --queue, the LocalQueue must exist (FAIL when Kueue is not
// installed or the queue is missing: the job would stay suspended forever). Without --queue it
// only says, where Kueue is installed, which LocalQueues the namespace has; ok is false when
// there is nothing to say.
func queueCheck(f Facts) (Check, bool) {
	c := Check{Name: "queue"}
	if f.Queue == "" {
		if f.KueueErr != nil || f.KueueVersion == "" || f.QueuesErr != nil {
			return c, false
		}
		c.Result = Pass
		c.Message = fmt.Sprintf("Kueue is installed; LocalQueues in namespace %s: %s (submit --queue NAME to go through one)",
			f.Namespace, kueue.Names(f.Queues))
		if f.Request.Pods > 1 {
			// Without a queue, the scheduler places each rank on its own: some may start while
			// others cannot be placed, and the started ones wait at the rendezvous.
			c.Result = Warn
			c.Message = fmt.Sprintf("a %d-node job without --queue on a cluster with Kueue: nothing admits its ranks together, so some "+
				"may start while others wait for GPUs; LocalQueues in namespace %s: %s", f.Request.Pods, f.Namespace, kueue.Names(f.Queues))
			c.Fix = "submit with --queue NAME (one of `kubectl get localqueues -n " + f.Namespace + "`) for all-or-nothing admission"
		}
		return c, true
	}
	switch {
	case f.KueueErr != nil:
		c.Result, c.Message = Warn, fmt.Sprintf("could not check that Kueue is installed: %v", f.KueueErr)
		c.Fix = "kubectl api-resources --api-group=" + kueue.Group
	case f.KueueVersion == "":
		c.Result, c.Message = Fail, kueue.NotInstalled(f.Queue)
		c.Fix = fmt.Sprintf("install Kueue (%s), or submit without --queue", kueue.InstallDocs)
	case apierrors.IsForbidden(f.QueuesErr):
		c.Result = Warn
		c.Message = fmt.Sprintf("you may not list LocalQueues in namespace %s, so queue %s is not checked (Kueue is installed)", f.Namespace, f.Queue)
		c.Fix = fmt.Sprintf("ask an admin to run `kubectl tao rbac -n %s --user YOU | kubectl apply -f -` (it grants get and list on localqueues)", f.Namespace)
	case f.QueuesErr != nil:
		c.Result, c.Message = Warn, fmt.Sprintf("listing LocalQueues in namespace %s failed: %v", f.Namespace, f.QueuesErr)
		c.Fix = "kubectl get localqueues -n " + f.Namespace
	case slices.Contains(f.Queues, f.Queue) && f.NeverFits != "":
		c.Result, c.Message = Fail, fmt.Sprintf("LocalQueue %s exists in namespace %s, but Kueue would never admit the job: %s", f.Queue, f.Namespace, f.NeverFits)
		c.Fix = "ask for fewer GPUs or nodes, or another queue (`kubectl tao capacity --queues` shows each ClusterQueue's GPU quota)"
	case slices.Contains(f.Queues, f.Queue) && f.ClusterQueueErr != nil:
		c.Result = Warn
		c.Message = fmt.Sprintf("LocalQueue %s exists in namespace %s, but its ClusterQueue could not be read (%v), so its quota is not checked",
			f.Queue, f.Namespace, apierrors.ReasonForError(f.ClusterQueueErr))
		c.Fix = fmt.Sprintf("kubectl get localqueue %s -n %s -o jsonpath='{.spec.clusterQueue}'", f.Queue, f.Namespace)
	case slices.Contains(f.Queues, f.Queue):
		c.Result = Pass
		c.Message = fmt.Sprintf("LocalQueue %s exists in namespace %s (%s/%s)", f.Queue, f.Namespace, kueue.Group, f.KueueVersion)
		if f.ClusterQueue != "" {
			c.Message += fmt.Sprintf(" and points at ClusterQueue %s, whose quota can hold the job", f.ClusterQueue)
		}
	default:
		c.Result, c.Message = Fail, kueue.Missing(f.Queue, f.Namespace, f.Queues, nil)
		c.Fix = fmt.Sprintf("pick one of `kubectl get localqueues -n %s`, or ask the cluster admin to create LocalQueue %s "+
			"(pointing at a ClusterQueue with GPU quota)", f.Namespace, f.Queue)
	}
	return c, true
}

// gpuMetricsCheck says whether top can read GPU numbers from dcgm-exporter on the GPU nodes.
// Without it top runs nvidia-smi in the ranks, so it is a warning at most.
func gpuMetricsCheck(f Facts) Check {
	c := Check{Name: "gpu-metrics"}
	const enable = "enable the GPU Operator's dcgm-exporter (dcgmExporter.enabled=true), or install NVIDIA's dcgm-exporter Helm chart"
	if f.ExportersErr != nil {
		c.Result, c.Message = Warn, "could not look for dcgm-exporter: "+f.ExportersErr.Error()+"; top runs nvidia-smi in the ranks instead"
		c.Fix = "kubectl get pods -A -l app=nvidia-dcgm-exporter"
		return c
	}
	gpuNodes, covered := 0, 0
	var denied []string
	seen := map[string]bool{}
	for i := range f.Nodes {
		q := f.Nodes[i].Status.Allocatable[f.Request.GPUName()]
		if q.Value() <= 0 {
			continue
		}
		gpuNodes++
		p, ok := f.Exporters[f.Nodes[i].Name]
		if !ok {
			continue
		}
		covered++
		if !f.ProxyAllowed[p.Namespace] && !seen[p.Namespace] {
			seen[p.Namespace] = true
			denied = append(denied, p.Namespace)
		}
	}
	sort.Strings(denied)
	switch {
	case gpuNodes == 0:
		c.Result, c.Message = Info, "no GPU nodes to read GPU metrics on"
	case covered == 0:
		c.Result, c.Fix = Warn, enable
		c.Message = fmt.Sprintf("GPU metrics: no dcgm-exporter on any of the %d GPU nodes; top runs nvidia-smi in the ranks instead", gpuNodes)
	case len(denied) > 0:
		c.Result = Warn
		c.Message = fmt.Sprintf("GPU metrics: exporter on %d of %d GPU nodes, but get on pods/proxy is denied in namespace %s; top runs nvidia-smi in the ranks instead", covered, gpuNodes, strings.Join(denied, ", "))
		c.Fix = fmt.Sprintf("an admin: kubectl tao rbac --gpu-metrics --gpu-metrics-namespace %s --user YOU | kubectl apply -f -", denied[0])
	case covered < gpuNodes:
		c.Result, c.Fix = Warn, enable+" on every GPU node"
		c.Message = fmt.Sprintf("GPU metrics: exporter on %d of %d GPU nodes, readable; the others' ranks fall back to nvidia-smi", covered, gpuNodes)
	default:
		c.Result, c.Message = Pass, fmt.Sprintf("GPU metrics: exporter on %d of %d GPU nodes, readable", covered, gpuNodes)
	}
	return c
}
