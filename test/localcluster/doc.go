// Package localcluster runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on loopback with KWOK simulating GPU nodes and pod
// lifecycles, so end-to-end tests and the demo exercise the real scheduler, job controller,
// garbage collector and log plumbing without docker or kind.
//
// Everything the cluster owns lives in one state directory: certificates, kubeconfigs, process
// records, component logs, etcd data and the simulated container logs. The binaries are built
// from the Go module proxy into a per-version cache outside the repository.
package localcluster
