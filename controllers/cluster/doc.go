// Package cluster is vmlet's cluster controller: it gives every pending VirtualMachineInstance
// a launcher pod (package launcherpod builds it), lets kube-scheduler place the pod, and hands
// the VMI to the node agent of the pod's node by setting status.nodeName (phase Scheduled). It
// fails the VMI when its pod fails or disappears, and deletes the pod when the VMI ends or is
// deleted. The node agent takes over a VMI once status.nodeName names its node; from then on
// this controller only watches the pod for failure, and keeps one attachment pod on the VMI's
// node for each hotpluggable claim volume in its spec (attachments.go; the agent plugs the
// claim once that pod runs), deleting those whose volume left the spec or that ended.
//
// Live migration (package migration makes the target launcher pods): a target pod is not the
// VMI's pod, and its failure or deletion is the migration's, not the VMI's (the migration
// controller deletes it when the migration fails), until the target's agent takes the VMI
// over by writing its node into status.nodeName. Then the target pod is the VMI's pod
// (status.launcher.pod) and the source pod is extra, deleted. The source launcher exits by
// itself once it handed the guest over: its pod ending after migrationState.completed, before
// the takeover, is waited out (TakeoverPoll), unless the target pod is gone too.
//
// NodeController is KubeVirt's virt-controller node controller: a Node whose agent stopped
// beating for three of its heartbeat intervals gets vmlet.dev/schedulable=false (so no new
// launcher pod lands there) and a NodeUnresponsive Event; its VMIs get Ready=False
// (NodeUnresponsive) and end Failed with that reason once their launcher pods are gone. The
// agent's next beat makes the node schedulable again.
//
// Local mode does not run it: controllers.LocalScheduler places VMIs on the single node there.
package cluster
