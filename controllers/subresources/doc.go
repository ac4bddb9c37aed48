// Package subresources is the aggregated API server of subresources.vmlet.dev/v1alpha1 (issue
// #17): a VMI's console, VNC, screenshot, QMP, QMP log, guest agent information, pause and
// port-forward, reached through the Kubernetes API by name and authorized with ordinary RBAC
// on virtualmachineinstances/<subresource>.
//
// It is built on k8s.io/apiserver with delegated authentication (front-proxy request headers
// from kube-apiserver's aggregator, client certificates and bearer tokens by TokenReview) and
// delegated authorization (SubjectAccessReview). pause/unpause it answers itself (spec.paused,
// which the node agent keeps); everything else it forwards to the VMI's node agent (package
// vmistream) over mTLS with the caller's name and QMP allow-list (see AllowListFor).
package subresources
