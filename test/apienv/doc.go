// Package apienv starts a real kube-apiserver and etcd for tests (controller-runtime envtest)
// from binaries the project builds itself (test/assets/controlplane/build.sh, cached outside the
// repo) and installs vmlet's CRDs from config/crd/bases.
//
// Start one environment per test package, in TestMain: the API server takes ≈3 s to start and
// the first create of a CR within 2 s of its CRD becoming Established waits 2 s.
package apienv
