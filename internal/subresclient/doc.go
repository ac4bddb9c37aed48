// Package subresclient is the client of vmlet's aggregated API subresources.vmlet.dev/v1alpha1
// (issue #17): per-VMI subresources under
// /apis/subresources.vmlet.dev/v1alpha1/namespaces/{ns}/virtualmachineinstances/{name}/{sub},
// reached through the Kubernetes API server with a rest.Config (kubeconfig credentials, any
// transport client-go supports), as virtctl reaches KubeVirt's subresources.
//
// Plain requests (guestosinfo, userlist, filesystemlist, vnc/screenshot, one qmp command,
// qmplog) go through a client-go REST client, so an error answer decodes to an
// *apierrors.StatusError (apierrors.IsForbidden, IsNotFound, IsConflict work). Streams (console,
// vnc, the qmp session, portforward/{port}) are websockets with KubeVirt's subprotocol
// "plain.kubevirt.io", dialed with client-go's websocket round tripper (the same TLS and
// authentication as the REST client); Dial returns a Stream, an io.ReadWriteCloser of the
// binary frames, and DialText a TextSession of text frames (the QMP session).
//
// Subpackage subrestest is an httptest server implementing the same contract, for tests.
package subresclient
