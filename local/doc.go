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
// The node agent itself is package nodeagent's, the same one `vmlet agent` runs; local mode adds
// the control plane and a scheduler that places every VMI on this machine.
package local
