//go:build tools

// Package controlplane pins the Kubernetes control-plane binaries that the tests run
// (kube-apiserver, kubectl, etcd; kubelet, kube-scheduler, kube-controller-manager and kube-proxy
// for the real cluster of test/realcluster). It is a separate module so that the main module's
// dependency graph never includes k8s.io/kubernetes. build.sh builds from it.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
