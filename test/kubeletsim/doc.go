// Package kubeletsim stands in for the parts of a cluster that tests on an API server alone do
// not have: a kube-scheduler (Scheduler binds pending pods to a node through the Binding
// subresource, as the real one does) and a kubelet (Kubelet runs each bound launcher pod's
// container as a process on this machine: its command with the real launcher binary, its
// hostPath volumes as folders, its persistentVolumeClaim volumes as their local or hostPath
// PersistentVolumes' paths (claims.go), a cgroup per pod, a network namespace with eth0 made
// by vmlet's node network as the CNI; it reports the pod Running, then Succeeded or Failed with the
// container's exit code, and finishes graceful deletions as a kubelet does).
//
// It is test code: no image is pulled, no mount namespace is made (mount paths are translated
// to their hostPath folders in the container's arguments), and only what vmlet's launcher pods
// use is supported.
package kubeletsim
