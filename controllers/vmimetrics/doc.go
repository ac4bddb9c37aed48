// Package vmimetrics is the node agent's Prometheus view of its VMIs, with KubeVirt's metric
// names, types, help texts, units and labels (virt-handler's domainstats and migration
// collectors, virt-controller's vmi_info, launcher overhead and phase-transition metrics), and
// vmlet's own vmlet_ metrics.
//
//   - names.go: every family this package exports, as one table (Families), from which the
//     collector builds its descriptors and the dashboard test takes its names.
//   - domainstats.go, migration.go, info.go: pure mappings from a VMI's identity and a
//     launcher's DomainStats / MigrationStatus response or the VMI object to const metrics. A
//     value the launcher could not read (a has_* flag false) gives no series, never a zero.
//   - collector.go: the prometheus.Collector. On each scrape it lists the VMIs of each Source
//     (one per node agent of the process: local mode runs several in one process), asks their
//     live launchers for DomainStats concurrently (bounded, with a deadline per launcher) and
//     emits the metrics; a launcher that fails is skipped and counted in
//     vmlet_vmi_stats_scrape_errors_total. Nothing polls between scrapes.
//   - own.go: vmlet's metrics that are observed where things happen (launcher RPC latency by a
//     gRPC client interceptor, reconcile outcomes, image pulls, launcher starts, VMI phase
//     transitions), registered on controller-runtime's registry.
//
// The package reads the launcher API's messages (qemu/launcher/api/v1) and the VMI types; it
// does not know how the agent reaches its launchers (Source.Launchers is that seam).
package vmimetrics
