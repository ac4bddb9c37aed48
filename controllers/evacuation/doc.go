// Package evacuation is the cluster side of node drains (KubeVirt's evacuation controller,
// pkg/virt-controller/watch/drain/evacuation): for every VMI on a node tainted
// vmlet.dev/drain:NoSchedule (KubeVirt's nodeDrainTaintKey) it applies the VMI's effective
// evictionStrategy — its own, else the cluster's (ConfigMap vmlet-system/vmlet-config, key
// evictionStrategy), else None:
//
//   - LiveMigrate, LiveMigrateIfPossible and migratable: status.evacuationNodeName is set and a
//     VirtualMachineInstanceMigration (generateName vmlet-evacuation-) is created, no more than
//     the migration slots allow (parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode),
//     a failed one retried with KubeVirt's back-off (20 s, doubling per consecutive failure);
//   - LiveMigrate and not migratable: the VMI stays and blocks the drain (condition
//     EvacuationBlocked, a Warning Event), as KubeVirt denies its eviction;
//   - LiveMigrateIfPossible and not migratable: condition DisruptionTarget, on which its node
//     agent shuts the guest down gracefully and ends the VMI Failed with reason Evicted (the
//     local equivalent of KubeVirt letting its launcher pod be evicted);
//   - External: status.evacuationNodeName only, for an external controller;
//   - None: nothing.
//
// Plan decides (pure); Controller reads the world and applies the decisions.
package evacuation
