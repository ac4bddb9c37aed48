package vmimetrics

import (
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a family's Prometheus type.
type Kind int

// Family kinds.
const (
	Counter Kind = iota
	Gauge
	Histogram
)

// Scope says which labels lead a family's series.
type Scope int

const (
	// ScopeKubeVirtVMI is node, namespace, name, then one kubernetes_vmi_label_<key> per label
	// of the VMI (KubeVirt's domainstats metrics), then the family's own labels.
	ScopeKubeVirtVMI Scope = iota
	// ScopeVMI is node, namespace, name, then the family's own labels (vmlet's per-VMI metrics,
	// KubeVirt's migration domain stats).
	ScopeVMI
	// ScopeOwn is the family's own labels only.
	ScopeOwn
)

// Family is one metric family this package exports: KubeVirt's name, type, help text and
// labels, or vmlet's.
type Family struct {
	Name   string
	Help   string
	Kind   Kind
	Scope  Scope
	Labels []string // the family's own labels, after the scope's
}

var vmiLabels = []string{"node", "namespace", "name"}

// kubevirtPhaseBuckets are KubeVirt's PhaseTransitionTimeBuckets (virt-controller).
var kubevirtPhaseBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600}

// KubeVirt's families, with virt-handler's and virt-controller's help texts verbatim.
var (
	CPUUsage       = kv("kubevirt_vmi_cpu_usage_seconds_total", Counter, "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage).")
	CPUUser        = kv("kubevirt_vmi_cpu_user_usage_seconds_total", Counter, "Total CPU time spent in user mode.")
	CPUSystem      = kv("kubevirt_vmi_cpu_system_usage_seconds_total", Counter, "Total CPU time spent in system mode.")
	VCPUSeconds    = kv("kubevirt_vmi_vcpu_seconds_total", Counter, "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time). Where `id` is the vcpu identifier and `state` can be one of the following: [`OFFLINE`, `RUNNING`, `BLOCKED`].", "id", "state")
	VCPUWait       = kv("kubevirt_vmi_vcpu_wait_seconds_total", Counter, "Amount of time spent by each vcpu while waiting on I/O.", "id")
	VCPUDelay      = kv("kubevirt_vmi_vcpu_delay_seconds_total", Counter, "Amount of time spent by each vcpu waiting in the queue instead of running.", "id")
	MemResident    = kv("kubevirt_vmi_memory_resident_bytes", Gauge, "Resident set size of the process running the domain.")
	MemAvailable   = kv("kubevirt_vmi_memory_available_bytes", Gauge, "Amount of usable memory as seen by the domain. This value may not be accurate if a balloon driver is in use or if the guest OS does not initialize all assigned pages")
	MemUnused      = kv("kubevirt_vmi_memory_unused_bytes", Gauge, "The amount of memory left completely unused by the system. Memory that is available but used for reclaimable caches should NOT be reported as free.")
	MemCached      = kv("kubevirt_vmi_memory_cached_bytes", Gauge, "The amount of memory that is being used to cache I/O and is available to be reclaimed, corresponds to the sum of `Buffers` + `Cached` + `SwapCached` in `/proc/meminfo`.")
	MemSwapIn      = kv("kubevirt_vmi_memory_swap_in_traffic_bytes", Gauge, "The total amount of data read from swap space of the guest in bytes.")
	MemSwapOut     = kv("kubevirt_vmi_memory_swap_out_traffic_bytes", Gauge, "The total amount of memory written out to swap space of the guest in bytes.")
	MemMajFault    = kv("kubevirt_vmi_memory_pgmajfault_total", Counter, "The number of page faults when disk IO was required. Page faults occur when a process makes a valid access to virtual memory that is not available. When servicing the page fault, if disk IO is required, it is considered as major fault.")
	MemMinFault    = kv("kubevirt_vmi_memory_pgminfault_total", Counter, "The number of other page faults, when disk IO was not required. Page faults occur when a process makes a valid access to virtual memory that is not available. When servicing the page fault, if disk IO is NOT required, it is considered as minor fault.")
	MemBalloon     = kv("kubevirt_vmi_memory_actual_balloon_bytes", Gauge, "Current balloon size in bytes.")
	MemUsable      = kv("kubevirt_vmi_memory_usable_bytes", Gauge, "The amount of memory which can be reclaimed by balloon without pushing the guest system to swap, corresponds to 'Available' in /proc/meminfo.")
	MemDomain      = kv("kubevirt_vmi_memory_domain_bytes", Gauge, "The amount of memory in bytes allocated to the domain. The `memory` value in domain xml file.")
	StorIopsRead   = kv("kubevirt_vmi_storage_iops_read_total", Counter, "Total number of I/O read operations.", "drive")
	StorIopsWrite  = kv("kubevirt_vmi_storage_iops_write_total", Counter, "Total number of I/O write operations.", "drive")
	StorReadBytes  = kv("kubevirt_vmi_storage_read_traffic_bytes_total", Counter, "Total number of bytes read from storage.", "drive")
	StorWriteBytes = kv("kubevirt_vmi_storage_write_traffic_bytes_total", Counter, "Total number of written bytes.", "drive")
	StorReadTimes  = kv("kubevirt_vmi_storage_read_times_seconds_total", Counter, "Total time spent on read operations.", "drive")
	StorWriteTimes = kv("kubevirt_vmi_storage_write_times_seconds_total", Counter, "Total time spent on write operations.", "drive")
	StorFlushReqs  = kv("kubevirt_vmi_storage_flush_requests_total", Counter, "Total storage flush requests.", "drive")
	StorFlushTimes = kv("kubevirt_vmi_storage_flush_times_seconds_total", Counter, "Total time spent on cache flushing.", "drive")
	NetTraffic     = kv("kubevirt_vmi_network_traffic_bytes_total", Counter, "[Deprecated] Total number of bytes sent and received.", "interface", "type")
	NetRxBytes     = kv("kubevirt_vmi_network_receive_bytes_total", Counter, "Total network traffic received in bytes.", "interface")
	NetTxBytes     = kv("kubevirt_vmi_network_transmit_bytes_total", Counter, "Total network traffic transmitted in bytes.", "interface")
	NetRxPackets   = kv("kubevirt_vmi_network_receive_packets_total", Counter, "Total network traffic received packets.", "interface")
	NetTxPackets   = kv("kubevirt_vmi_network_transmit_packets_total", Counter, "Total network traffic transmitted packets.", "interface")
	NetRxErrors    = kv("kubevirt_vmi_network_receive_errors_total", Counter, "Total network received error packets.", "interface")
	NetTxErrors    = kv("kubevirt_vmi_network_transmit_errors_total", Counter, "Total network transmitted error packets.", "interface")
	NetRxDropped   = kv("kubevirt_vmi_network_receive_packets_dropped_total", Counter, "The total number of rx packets dropped on vNIC interfaces.", "interface")
	NetTxDropped   = kv("kubevirt_vmi_network_transmit_packets_dropped_total", Counter, "The total number of tx packets dropped on vNIC interfaces.", "interface")
	FSCapacity     = kv("kubevirt_vmi_filesystem_capacity_bytes", Gauge, "Total VM filesystem capacity in bytes.", "disk_name", "mount_point", "file_system_type")
	FSUsed         = kv("kubevirt_vmi_filesystem_used_bytes", Gauge, "Used VM filesystem capacity in bytes.", "disk_name", "mount_point", "file_system_type")

	// virt-controller's, from the VMI object.
	Info = &Family{Name: "kubevirt_vmi_info", Kind: Gauge, Scope: ScopeOwn, Help: "Information about VirtualMachineInstances.",
		Labels: []string{"node", "namespace", "name", "phase", "os", "workload", "flavor", "instance_type", "preference",
			"guest_os_kernel_release", "guest_os_machine", "guest_os_arch", "guest_os_name", "guest_os_version_id",
			"evictable", "outdated", "vmi_pod"}}
	LauncherOverhead = &Family{Name: "kubevirt_vmi_launcher_memory_overhead_bytes", Kind: Gauge, Scope: ScopeOwn,
		Help: "Estimation of the memory amount required for virt-launcher's infrastructure components (e.g. libvirt, QEMU).", Labels: []string{"namespace", "name"}}
	PhaseTransition = &Family{Name: "kubevirt_vmi_phase_transition_time_seconds", Kind: Histogram, Scope: ScopeOwn,
		Help: "Histogram of VM phase transitions duration between different phases in seconds.", Labels: []string{"phase", "last_phase"}}
	MigrationSucceeded = &Family{Name: "kubevirt_vmi_migration_succeeded", Kind: Gauge, Scope: ScopeOwn,
		Help: "Indicates if the VMI migration succeeded.", Labels: []string{"vmi", "vmim", "namespace"}}
	MigrationFailed = &Family{Name: "kubevirt_vmi_migration_failed", Kind: Gauge, Scope: ScopeOwn,
		Help: "Indicates if the VMI migration failed.", Labels: []string{"vmi", "vmim", "namespace"}}

	// virt-handler's migration domain stats (namespace, name, node).
	MigDataTotal     = &Family{Name: "kubevirt_vmi_migration_data_bytes_total", Kind: Counter, Scope: ScopeVMI, Help: "The total Guest OS data to be migrated to the new VM."}
	MigDataRemaining = mig("kubevirt_vmi_migration_data_remaining_bytes", "The remaining guest OS data to be migrated to the new VM.")
	MigDataProcessed = mig("kubevirt_vmi_migration_data_processed_bytes", "The total Guest OS data processed and migrated to the new VM.")
	MigDirtyRate     = mig("kubevirt_vmi_migration_dirty_memory_rate_bytes", "The rate of memory being dirty in the Guest OS.")
	MigTransferRate  = mig("kubevirt_vmi_migration_memory_transfer_rate_bytes", "The rate at which the memory is being transferred.")
)

// vmlet's own families.
var (
	QMPDuration = &Family{Name: "vmlet_qmp_command_duration_seconds", Kind: Histogram, Scope: ScopeVMI, Labels: []string{"command"},
		Help: "Latency of the QMP commands a VMI's launcher sent to QEMU (reply received), by command, since the launcher started."}
	QMPErrors = &Family{Name: "vmlet_qmp_command_errors_total", Kind: Counter, Scope: ScopeVMI, Labels: []string{"command"},
		Help: "QMP commands QEMU answered with an error, by command, since the launcher started."}
	QMPLosses = &Family{Name: "vmlet_qmp_connection_losses_total", Kind: Counter, Scope: ScopeVMI,
		Help: "Times a VMI's launcher lost its QMP connection to QEMU, since the launcher started."}
	QEMUFaults = &Family{Name: "vmlet_vmi_qemu_page_faults_total", Kind: Counter, Scope: ScopeVMI, Labels: []string{"kind"},
		Help: "Page faults of the QEMU process (host view, /proc/<pid>/stat minflt/majflt), kind minor or major."}
	ScrapeErrors = &Family{Name: "vmlet_vmi_stats_scrape_errors_total", Kind: Counter, Scope: ScopeOwn, Labels: []string{"node", "call"},
		Help: "Launcher calls a metrics scrape skipped because they failed or ran out of time, by node and call (domain_stats, migration_status, list, list_migrations)."}
	LauncherRPC = &Family{Name: "vmlet_launcher_rpc_duration_seconds", Kind: Histogram, Scope: ScopeOwn, Labels: []string{"method", "code"},
		Help: "Latency of the node agent's unary gRPC calls to its launchers, by method and gRPC status code."}
	Reconciles = &Family{Name: "vmlet_vmi_reconcile_total", Kind: Counter, Scope: ScopeOwn, Labels: []string{"result", "reason"},
		Help: "VMI reconciles of the node agent by result (ok, requeue, conflict, error) and the reason of the VMI's Ready condition after the pass."}
	ImagePulls = &Family{Name: "vmlet_image_pulls_total", Kind: Counter, Scope: ScopeOwn, Labels: []string{"result"},
		Help: "Image pulls (cache hits included) of the node's image cache, by result (success, failure)."}
	ImagePullDuration = &Family{Name: "vmlet_image_pull_duration_seconds", Kind: Histogram, Scope: ScopeOwn, Labels: []string{"result"},
		Help: "Duration of image pulls (cache hits included), by result."}
	LauncherStarts = &Family{Name: "vmlet_launcher_starts_total", Kind: Counter, Scope: ScopeOwn, Labels: []string{"result"},
		Help: "Launcher processes (pods) the node agent started, by result (success, failure)."}
	LauncherStartDuration = &Family{Name: "vmlet_launcher_start_duration_seconds", Kind: Histogram, Scope: ScopeOwn, Labels: []string{"result"},
		Help: "Duration of starting a launcher (its process in its jail, or its pod), by result."}
)

// Families lists every family this package exports (the KubeVirt-named ones first).
func Families() []*Family {
	return []*Family{
		CPUUsage, CPUUser, CPUSystem, VCPUSeconds, VCPUWait, VCPUDelay,
		MemResident, MemAvailable, MemUnused, MemCached, MemSwapIn, MemSwapOut, MemMajFault, MemMinFault, MemBalloon, MemUsable, MemDomain,
		StorIopsRead, StorIopsWrite, StorReadBytes, StorWriteBytes, StorReadTimes, StorWriteTimes, StorFlushReqs, StorFlushTimes,
		NetTraffic, NetRxBytes, NetTxBytes, NetRxPackets, NetTxPackets, NetRxErrors, NetTxErrors, NetRxDropped, NetTxDropped,
		FSCapacity, FSUsed,
		Info, LauncherOverhead, PhaseTransition, MigrationSucceeded, MigrationFailed,
		MigDataTotal, MigDataRemaining, MigDataProcessed, MigDirtyRate, MigTransferRate,
		QMPDuration, QMPErrors, QMPLosses, QEMUFaults, ScrapeErrors, LauncherRPC, Reconciles,
		ImagePulls, ImagePullDuration, LauncherStarts, LauncherStartDuration,
	}
}

// SeriesNames are the names a family's samples have in the exposition format: a histogram's
// _bucket, _sum and _count.
func (f *Family) SeriesNames() []string {
	if f.Kind == Histogram {
		return []string{f.Name + "_bucket", f.Name + "_sum", f.Name + "_count"}
	}
	return []string{f.Name}
}

func kv(name string, k Kind, help string, labels ...string) *Family {
	return &Family{Name: name, Help: help, Kind: k, Scope: ScopeKubeVirtVMI, Labels: labels}
}

func mig(name, help string) *Family {
	return &Family{Name: name, Help: help, Kind: Gauge, Scope: ScopeVMI}
}

// labelFormatter and labelPrefix turn a VMI's labels into KubeVirt's runtime labels
// (virt-handler domainstats.go).
var labelFormatter = strings.NewReplacer(".", "_", "/", "_", "-", "_")

const labelPrefix = "kubernetes_vmi_label_"

// VMI is who a VMI's series are about.
type VMI struct {
	Node, Namespace, Name string
	// Labels are the VMI's labels; KubeVirt's domainstats series carry each as
	// kubernetes_vmi_label_<key with . / - as _>.
	Labels map[string]string
	// Interfaces maps the launcher's NIC ids to the VMI's interface names, KubeVirt's
	// interface label (a NIC id not in it is its own name).
	Interfaces map[string]string
}

// series builds a VMI's metrics: the descriptors for its label set and the values of its
// leading labels, computed once per VMI.
type series struct {
	id       VMI
	kvNames  []string // node, namespace, name, kubernetes_vmi_label_*
	kvValues []string
	out      []prometheus.Metric
}

func newSeries(id VMI) *series {
	s := &series{id: id, kvNames: append([]string(nil), vmiLabels...), kvValues: []string{id.Node, id.Namespace, id.Name}}
	keys := make([]string, 0, len(id.Labels))
	for k := range id.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, k := range keys {
		n := labelPrefix + labelFormatter.Replace(k)
		if seen[n] {
			continue // two keys that format alike: the first wins
		}
		seen[n] = true
		s.kvNames = append(s.kvNames, n)
		s.kvValues = append(s.kvValues, id.Labels[k])
	}
	return s
}

func (s *series) lead(f *Family) (names, values []string) {
	switch f.Scope {
	case ScopeKubeVirtVMI:
		return s.kvNames, s.kvValues
	case ScopeVMI:
		return vmiLabels, []string{s.id.Node, s.id.Namespace, s.id.Name}
	}
	return nil, nil
}

// add appends one sample of a counter or gauge family.
func (s *series) add(f *Family, v float64, own ...string) {
	names, values := s.lead(f)
	vt := prometheus.GaugeValue
	if f.Kind == Counter {
		vt = prometheus.CounterValue
	}
	m, err := prometheus.NewConstMetric(descFor(f, names), vt, v, append(append([]string(nil), values...), own...)...)
	if err == nil {
		s.out = append(s.out, m)
	}
}

// addHistogram appends one sample of a histogram family.
func (s *series) addHistogram(f *Family, count uint64, sum float64, buckets map[float64]uint64, own ...string) {
	names, values := s.lead(f)
	m, err := prometheus.NewConstHistogram(descFor(f, names), count, sum, buckets, append(append([]string(nil), values...), own...)...)
	if err == nil {
		s.out = append(s.out, m)
	}
}

// descs caches descriptors by family and leading label names (VMIs with the same label keys
// share them); it is emptied when it grows past descCacheMax.
var descs = struct {
	sync.Mutex
	m map[string]*prometheus.Desc
}{m: map[string]*prometheus.Desc{}}

const descCacheMax = 4096

func descFor(f *Family, lead []string) *prometheus.Desc {
	key := f.Name + "\x00" + strings.Join(lead, "\x00")
	descs.Lock()
	defer descs.Unlock()
	if d, ok := descs.m[key]; ok {
		return d
	}
	if len(descs.m) >= descCacheMax {
		clear(descs.m)
	}
	d := prometheus.NewDesc(f.Name, f.Help, append(append([]string(nil), lead...), f.Labels...), nil)
	descs.m[key] = d
	return d
}
