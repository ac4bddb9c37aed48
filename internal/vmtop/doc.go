// Package vmtop turns two scrapes of vmlet node agents' Prometheus metrics into the per-VMI
// figures `vmctl top` prints: CPU, memory, disk and network, like `kubectl top pod` for pods.
// It does no I/O: the caller scrapes (twice, some interval apart), parses with Parse, and
// hands both scrapes with the time between them to Rows.
//
// The metrics are KubeVirt's (docs/observability/metrics.md in kubevirt/kubevirt), labelled
// node, namespace, name (+ drive on storage, interface on network):
//
//	kubevirt_vmi_cpu_usage_seconds_total            counter  → CPU, as a rate in CPUs
//	kubevirt_vmi_memory_resident_bytes              gauge    → resident memory (second scrape)
//	kubevirt_vmi_memory_domain_bytes                gauge    → memory given to the guest
//	kubevirt_vmi_storage_read_traffic_bytes_total   counter  → B/s, summed over drives
//	kubevirt_vmi_storage_write_traffic_bytes_total  counter  → B/s, summed over drives
//	kubevirt_vmi_network_receive_bytes_total        counter  → B/s, summed over interfaces
//	kubevirt_vmi_network_transmit_bytes_total       counter  → B/s, summed over interfaces
//
// Rates follow Prometheus' rate(): each series (one drive, one interface) is matched by its
// full label set across the two scrapes; a counter that went down was reset (the VMI's QEMU
// restarted, a drive was re-attached) and counts from zero, so its increase is its second
// value and no rate is ever negative. A series in only one scrape adds nothing (a drive
// hot-plugged between the scrapes). A VMI is reported when it is in the second scrape; one
// that is only in the first (stopped, migrated away) is gone and is not. A figure whose
// series are missing from either scrape is unknown (nil), not zero.
package vmtop
