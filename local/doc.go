// Package local is vmlet's single-machine mode (`vmlet local`, what `make run` starts): an
// embedded control plane (etcd + kube-apiserver processes from the project's cached binaries,
// with etcd's data persisted in a state folder), vmlet's CRDs installed, a kubeconfig written and
// a Node registered for this machine, so that the node agent and cluster controller can run
// against it with no kubelet.
//
// The control-plane processes are managed with controller-runtime's envtest process manager:
// the same, well-tested code that the test suites use to run a real API server. Certificates are
// regenerated on every start and the kubeconfig is rewritten; etcd's data survives restarts, so a
// second `make run` picks up the same objects.
//
// Storage: images are pulled into an OCI image cache in the state folder (images/), each VMI's
// overlays, empty disks and cloud-init ISOs live in volumes/<uid> until the VMI is deleted.
// Local mode has no PersistentVolumes: `--claim NAME=PATH` says which folder (with disk.img) or
// block device a claim name means, `--host-disk-root` which folder hostDisks may use, and
// `--image REF=SOURCE` where an image reference is pulled from (e.g. an OCI layout on disk).
package local
