// Package permissions lists every API request kubectl tao makes: what `kubectl tao rbac`
// grants and what preflight reviews.
package permissions

import authv1 "k8s.io/api/authorization/v1"

// Access is one permission a kubectl tao command needs, and who needs it.
type Access struct {
	Verb, Group, Resource, Subresource string
	// Cluster marks reads across the cluster (a ClusterRole grants them).
	Cluster bool
	// Optional marks what only degrades a check when denied; the rest breaks a command.
	Optional bool
	For      string
}

func (a Access) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	return a.Verb + " " + r
}

// Attributes is the access review's question, in namespace ns.
func (a Access) Attributes(ns string) *authv1.ResourceAttributes {
	if a.Cluster {
		ns = ""
	}
	return &authv1.ResourceAttributes{Namespace: ns, Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource}
}

// Needed is every request kubectl tao's commands make: the Role and ClusterRole `kubectl tao
// rbac` prints grant exactly these, and preflight reviews each one. Keep it in step with the
// commands' API calls.
var Needed = []Access{
	{Verb: "create", Group: "batch", Resource: "jobs", For: "submit"},
	{Verb: "patch", Group: "batch", Resource: "jobs", For: "submit (unsuspend, or add the --queue label)"},
	{Verb: "delete", Group: "batch", Resource: "jobs", For: "submit rollback, cancel, delete, prune"},
	{Verb: "get", Group: "batch", Resource: "jobs", For: "status, wait, logs, diagnose, cancel, results"},
	{Verb: "list", Group: "batch", Resource: "jobs", For: "list, prune"},
	{Verb: "watch", Group: "batch", Resource: "jobs", For: "wait, list --watch, cancel"},
	{Verb: "update", Group: "batch", Resource: "jobs", Subresource: "finalizers", For: "submit, where owner references are enforced"},
	{Verb: "create", Resource: "services", For: "multi-node submit"},
	{Verb: "delete", Resource: "services", For: "submit rollback"},
	{Verb: "create", Resource: "configmaps", For: "submit --file"},
	{Verb: "delete", Resource: "configmaps", For: "submit rollback"},
	{Verb: "create", Resource: "secrets", For: "create-pull-secret, submit --secret-env (NAME-env) and --input/--output-path (NAME-s3)"},
	{Verb: "update", Resource: "secrets", For: "create-pull-secret --overwrite"},
	{Verb: "delete", Resource: "secrets", For: "submit rollback"},
	{Verb: "get", Resource: "secrets", Optional: true, For: "submit --s3-secret's check; delete-artifacts, results and logs (the log archive) without S3 credentials in the shell"},
	{Verb: "get", Resource: "pods", For: "status"},
	{Verb: "list", Resource: "pods", For: "status, logs, diagnose"},
	{Verb: "watch", Resource: "pods", For: "logs -f, wait, cancel"},
	{Verb: "delete", Resource: "pods", For: "cancel --grace-period"},
	{Verb: "get", Resource: "pods", Subresource: "log", For: "logs, top (each rank's last line)"},
	{Verb: "create", Resource: "pods", Subresource: "exec", For: "exec; top and diagnose of a running job (nvidia-smi where no exporter runs, the progress file)"},
	{Verb: "create", Resource: "pods", Subresource: "portforward", For: "port-forward"},
	{Verb: "list", Resource: "events", For: "diagnose, replicas"},
	// Kueue's LocalQueues: without them submit --queue and preflight cannot check the queue
	// exists, warn, and leave it to Kueue. Granting them is harmless where Kueue is not installed.
	{Verb: "get", Group: "kueue.x-k8s.io", Resource: "localqueues", Optional: true, For: "submit --queue, preflight --queue (the LocalQueue exists), status and diagnose of a queued job (its ClusterQueue)"},
	{Verb: "list", Group: "kueue.x-k8s.io", Resource: "localqueues", Optional: true, For: "preflight, and submit --queue naming the queues there"},
	{Verb: "list", Group: "kueue.x-k8s.io", Resource: "workloads", Optional: true, For: "status, list, replicas and diagnose of a job waiting in a queue (why: Queued, Preempted, ...)"},
	// Kueue's visibility API (an aggregated API of the manager, where its VisibilityOnDemand
	// feature serves it): the only source of a queued job's position; without it none is shown.
	{Verb: "get", Group: "visibility.kueue.x-k8s.io", Resource: "localqueues", Subresource: "pendingworkloads", Optional: true, For: "status, list and wait of a queued job (its position in the queue)"},
	{Verb: "get", Resource: "namespaces", Optional: true, For: "preflight's namespace check"},
	{Verb: "get", Resource: "nodes", Cluster: true, Optional: true, For: "diagnose (node conditions)"},
	{Verb: "list", Resource: "nodes", Cluster: true, Optional: true, For: "the capacity guard, preflight, capacity"},
	{Verb: "list", Resource: "pods", Cluster: true, Optional: true, For: "free GPUs in preflight and capacity; top finding dcgm-exporter in any namespace"},
	{Verb: "list", Group: "apps", Resource: "daemonsets", Cluster: true, Optional: true, For: "preflight's GPU Operator check"},
	{Verb: "get", Group: "kueue.x-k8s.io", Resource: "clusterqueues", Cluster: true, Optional: true, For: "submit --queue, preflight --queue, status and diagnose: the queue's quota and whether it can ever hold the job"},
	{Verb: "list", Group: "kueue.x-k8s.io", Resource: "clusterqueues", Cluster: true, Optional: true, For: "capacity --queues"},
	{Verb: "get", Group: "kueue.x-k8s.io", Resource: "workloadpriorityclasses", Cluster: true, Optional: true, For: "submit --queue --priority-class (the WorkloadPriorityClass exists)"},
}

// GPUMetrics is what top needs in dcgm-exporter's namespace to read it (`kubectl tao rbac
// --gpu-metrics`): a Role there, never a ClusterRole, since pods/proxy reaches whatever a pod
// serves, in every namespace it is granted.
var GPUMetrics = []Access{
	{Verb: "get", Resource: "pods", Subresource: "proxy", Optional: true, For: "top and diagnose: reading dcgm-exporter's /metrics through the API server"},
	{Verb: "list", Resource: "pods", Optional: true, For: "top: finding dcgm-exporter where pods cannot be listed in every namespace"},
}
