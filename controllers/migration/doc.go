// Package migration is the cluster side of live migration: the VirtualMachineInstanceMigration
// controller (KubeVirt's virt-controller migration controller) and the pure rules it and the
// node agents share — which vmis can migrate (LiveMigratable and its reasons), the cluster's
// migration configuration with KubeVirt's defaults, and the phase a migration is in given the
// vmi's migrationState.
//
// A migration's life: the controller admits it (the vmi runs, is migratable and has no other
// migration), waits for a slot (parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode),
// places the target (Picker), labels the vmi with both nodes (LabelSourceNode,
// LabelTargetNode: a cluster's node agents cache only their own vmis otherwise) and writes
// status.migrationState on the vmi (migrationUid, source and target node and pod, the resolved
// configuration: the cluster's, with the fields of the MigrationPolicy that matches the vmi
// over it, whose name goes to migrationPolicyName — MatchPolicy and ApplyPolicy in policy.go,
// KubeVirt's precedence). From there the node agents act on the vmi: the
// target prepares storage, network and a launcher whose QEMU waits for the stream, and
// publishes its address; the source records its device layout, migrates through the agents'
// relays, and finalizes; the target takes the vmi over (status.nodeName). The controller only
// mirrors migrationState into the migration's status and derives its phase. Deleting a
// migration that has not ended asks the source to abort it (abortRequested).
//
// Placing the target: local mode picks one of its nodes (controllers.LocalScheduler). Cluster
// mode (TargetPods) makes a target launcher pod: the vmi's launcher pod as package
// launcherpod builds it, labelled with the migration (launcherpod.LabelMigrationUID,
// LabelMigrationRole target) and kept off the source node by a required node affinity; the
// migration waits in Scheduling (TargetScheduled=False with kube-scheduler's message) until
// the pod is bound, and fails after SchedulingTimeout. A migration that fails, is aborted or
// deleted has its target pod deleted here; once one succeeded, the target pod is the vmi's
// and the cluster controller (controllers/cluster) deletes the source pod.
package migration
