// Package controllers is the node agent: the only place where Kubernetes types meet the host
// packages (qemu, devices, network, storage).
//
//   - VMIReconciler runs every VMI assigned to its node through one vmlet-launcher (started by
//     a LauncherRuntime: process in local mode, podruntime in a cluster; reached over gRPC,
//     woken by readyWatch and launcher events) and writes the observed domain state back into
//     status once per pass. It refuses unsupported KubeVirt annotations (hook sidecars) and
//     keeps its finalizer until the node-local state is torn down. Anything slow runs as a
//     tracked operation (subpackage ops) whose end wakes the VMI: storage, vCPU placement,
//     early network attaches, pause and unpause (pause.go). A running domain's Sync is asked
//     once per spec and QEMU (sync.go); the echo of the agent's own status write makes no
//     pass (echo.go).
//   - Translation is subpackage translate (pure, table-tested): each reconcile pass turns the
//     VMI into one translate.Desired (domain spec, storage plan, network spec, hotplug sets)
//     and hands it to the storage, network and hotplug steps.
//   - Storage: prepares disks with package storage, retries image pulls with the kubelet's
//     back-off (ImagePullBackOff/ErrImagePull, package backoff) and hotplugs volumes.
//   - Network: wires each VMI's pod network and secondary networks, makes a VMI wait
//     (Synchronized=False, UnknownNetwork) while the node lacks one, hotplugs NICs and reports
//     status.interfaces from the bindings and the guest agent. A secondary network that spans
//     the nodes (NodeNetwork.Spanning, local mode's SharedNetwork) keeps an interface's address
//     on every node: a migration target wires it before its QEMU starts
//     (migration_target_hot.go), and such VMIs are LiveMigratable.
//   - Heartbeat keeps the Node's vmlet.dev labels and heartbeat annotation fresh (and, in
//     local mode, its Ready condition); LocalScheduler places VMIs in local mode;
//     ShutdownNode is the graceful node shutdown (VMIs end Failed, reason NodeShutdown).
//   - Metrics: subpackage vmimetrics maps the launchers' DomainStats to KubeVirt's
//     kubevirt_vmi_* metrics on each scrape; the reconciler is its vmimetrics.Launchers
//     (vmi_metrics.go: its live launcher connections, no dialing) and observes reconcile
//     outcomes, phase transitions and launcher starts where they happen.
//
// The cluster side lives in subpackages: cluster (launcher pods, status.nodeName) and
// launcherpod (the pod it builds). Both sides write phases, conditions and reasons with package
// vmistatus, the one status vocabulary. Package migration is the VirtualMachineInstanceMigration
// controller; the node agent plays the migration's source and target (migration_source.go,
// migration_target.go), on the vmi's status.migrationState.
package controllers
