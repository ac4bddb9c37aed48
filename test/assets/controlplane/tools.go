//go:build tools

// Package controlplane pins the Kubernetes control-plane binaries that the tests run
// (kube-apiserver, kubectl, etcd). It is a separate module so that the main module's
// dependency graph never includes k8s.io/kubernetes. build.sh builds from it.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
