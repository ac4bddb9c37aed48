// Package realclustere2e tests vmlet deployed on a real single-node Kubernetes: one cluster
// per package (test/realcluster: containerd + runc, the CNI bridge, etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and a kubelet on this machine, cgroupfs driver on
// this cgroup-v1 hybrid host), vmlet's images (hack/images.sh) imported into its containerd,
// and vmlet deployed only through `kubectl apply -k config/realcluster` (hack/cluster-deploy.sh,
// what `make cluster-up` runs). Launcher pods are scheduled by kube-scheduler and run by the
// kubelet; the agent runs as the DaemonSet's pod.
//
// The tests act as an operator would (kubectl create/delete, kubectl delete pod) and check the
// node as root: QEMU's process, its pod's cgroups, the device program, the pinned network
// namespace and vmlet's folders, before and after. After the last test TestMain deletes the
// deployment, stops the cluster and fails the package if anything of it, or of vmlet's node
// folders, is left. Only test files live here.
package realclustere2e
