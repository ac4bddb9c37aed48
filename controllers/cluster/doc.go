// Package cluster is vmlet's cluster controller: it gives every pending VirtualMachineInstance
// a launcher pod (package launcherpod builds it), lets kube-scheduler place the pod, and hands
// the VMI to the node agent of the pod's node by setting status.nodeName (phase Scheduled). It
// fails the VMI when its pod fails or disappears, and deletes the pod when the VMI ends or is
// deleted. The node agent takes over a VMI once status.nodeName names its node; from then on
// this controller only watches the pod for failure.
//
// Local mode does not run it: controllers.LocalScheduler places VMIs on the single node there.
package cluster
