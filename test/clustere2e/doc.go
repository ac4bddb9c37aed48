// Package clustere2e tests cluster mode end to end on one machine: a real API server, the
// `vmlet controller` and `vmlet agent --runtime pod` binaries, and kubeletsim standing in for
// kube-scheduler and the kubelet (launcher pods run as processes with a cgroup and network
// namespace each). Only test files live here.
package clustere2e
