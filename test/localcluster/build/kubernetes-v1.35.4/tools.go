//go:build tools

// Package tools pins the Kubernetes commands this module builds: the control plane, the real
// node's kubelet and kubectl (for a machine without one), in one module so they share one build
// cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
