// Package migration is the cluster side of live migration: the VirtualMachineInstanceMigration
// controller (KubeVirt's virt-controller migration controller) and the pure rules it and the
// node agents share — which vmis can migrate (LiveMigratable and its reasons), the cluster's
// migration configuration with KubeVirt's defaults, and the phase a migration is in given the
// vmi's migrationState.
//
// A migration's life: the controller admits it (the vmi runs, is migratable and has no other
// migration), waits for a slot (parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode),
// picks a target node and writes status.migrationState on the vmi (migrationUid, source and
// target node, the resolved configuration: the cluster's, with the fields of the
// MigrationPolicy that matches the vmi over it, whose name goes to migrationPolicyName —
// MatchPolicy and ApplyPolicy in policy.go, KubeVirt's precedence). From there the node agents act on the vmi: the
// target prepares storage, network and a launcher whose QEMU waits for the stream, and
// publishes its address; the source records its device layout, migrates through the agents'
// relays, and finalizes; the target takes the vmi over (status.nodeName). The controller only
// mirrors migrationState into the migration's status and derives its phase. Deleting a
// migration that has not ended asks the source to abort it (abortRequested).
package migration
