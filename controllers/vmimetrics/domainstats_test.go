package vmimetrics

import (
	"testing"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

var testVMI = VMI{Node: "node-a", Namespace: "ns", Name: "vm1", Labels: map[string]string{"app.kubernetes.io/name": "db", "tier": "back-end"},
	Interfaces: map[string]string{"net-default": "default"}}

// vmiKey is the label part every KubeVirt domainstats series of testVMI starts with.
func kvLabels(extra ...string) map[string]string {
	m := map[string]string{"node": "node-a", "namespace": "ns", "name": "vm1",
		"kubernetes_vmi_label_app_kubernetes_io_name": "db", "kubernetes_vmi_label_tier": "back-end"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func vmiOnly(extra ...string) map[string]string {
	m := map[string]string{"node": "node-a", "namespace": "ns", "name": "vm1"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// full is a response with every field filled and known.
func full() *pb.DomainStatsResponse {
	return &pb.DomainStatsResponse{
		Vcpus: []*pb.VCPUStats{
			{Index: 0, TimeNs: 3e9, DelayNs: 2e8, HasDelay: true, WaitNs: 1e8, HasWait: true},
			{Index: 1, TimeNs: 1e9, DelayNs: 4e8, HasDelay: true, WaitNs: 3e8, HasWait: true},
		},
		CpuUserNs: 5e9, CpuSystemNs: 15e8,
		Memory: &pb.MemoryStats{
			GuestBytes: 256 << 20, QemuRssBytes: 300 << 20, QemuPssBytes: 290 << 20,
			HasBalloon: true, ActualBalloonBytes: 200 << 20,
			HasGuestStats:  true,
			AvailableBytes: 150 << 20, HasAvailable: true, TotalMemoryBytes: 240 << 20, HasTotalMemory: true,
			UnusedBytes: 100 << 20, HasUnused: true, MajorFaults: 7, HasMajorFaults: true,
			MinorFaults: 7000, HasMinorFaults: true, SwapInBytes: 4096, HasSwapIn: true,
			SwapOutBytes: 8192, HasSwapOut: true, DiskCachesBytes: 30 << 20, HasDiskCaches: true,
		},
		Block: []*pb.BlockStats{{Id: "rootdisk", RdBytes: 1000, WrBytes: 2000, RdOps: 10, WrOps: 20, FlushOps: 3,
			RdTotalTimeNs: 5e8, WrTotalTimeNs: 25e7, FlushTotalTimeNs: 1e7}},
		Net: []*pb.NetStats{{Id: "net-default", Tap: "tap0", RxBytes: 111, RxPackets: 11, TxBytes: 222, TxPackets: 22,
			RxDropped: 1, TxDropped: 2, RxErrors: 3, TxErrors: 4}},
		QemuMinorFaults: 900, QemuMajorFaults: 9,
		Filesystems: []*pb.FilesystemStats{{MountPoint: "/", Type: "ext4", DiskName: "rootdisk", TotalBytes: 1 << 30, UsedBytes: 1 << 29}},
		Launcher: &pb.LauncherStats{QmpConnectionLosses: 2, Qmp: []*pb.QMPCommandStats{{
			Command: "query-status", Count: 5, SumSeconds: 0.004, UpperBoundsSeconds: []float64{0.0005, 0.001, 0.01},
			BucketCounts: []uint64{1, 4, 5}, Errors: 1,
		}}},
	}
}

// TestDomainStatsFull: every field of a full response becomes KubeVirt's series with
// KubeVirt's labels and units (seconds, bytes), the network counters in the guest's view.
func TestDomainStatsFull(t *testing.T) {
	got := read(t, DomainStats(testVMI, full()))
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"kubevirt_vmi_cpu_usage_seconds_total", kvLabels(), 6.5},
		{"kubevirt_vmi_cpu_user_usage_seconds_total", kvLabels(), 5},
		{"kubevirt_vmi_cpu_system_usage_seconds_total", kvLabels(), 1.5},
		{"kubevirt_vmi_vcpu_seconds_total", kvLabels("id", "0", "state", "running"), 3},
		{"kubevirt_vmi_vcpu_seconds_total", kvLabels("id", "1", "state", "running"), 1},
		{"kubevirt_vmi_vcpu_delay_seconds_total", kvLabels("id", "0"), 0.2},
		{"kubevirt_vmi_vcpu_delay_seconds_total", kvLabels("id", "1"), 0.4},
		{"kubevirt_vmi_vcpu_wait_seconds_total", kvLabels("id", "0"), 0.1},
		{"kubevirt_vmi_vcpu_wait_seconds_total", kvLabels("id", "1"), 0.3},
		{"kubevirt_vmi_memory_resident_bytes", kvLabels(), 300 << 20},
		{"kubevirt_vmi_memory_domain_bytes", kvLabels(), 256 << 20},
		{"kubevirt_vmi_memory_actual_balloon_bytes", kvLabels(), 200 << 20},
		{"kubevirt_vmi_memory_available_bytes", kvLabels(), 240 << 20}, // stat-total-memory
		{"kubevirt_vmi_memory_usable_bytes", kvLabels(), 150 << 20},    // stat-available-memory
		{"kubevirt_vmi_memory_unused_bytes", kvLabels(), 100 << 20},
		{"kubevirt_vmi_memory_cached_bytes", kvLabels(), 30 << 20},
		{"kubevirt_vmi_memory_swap_in_traffic_bytes", kvLabels(), 4096},
		{"kubevirt_vmi_memory_swap_out_traffic_bytes", kvLabels(), 8192},
		{"kubevirt_vmi_memory_pgmajfault_total", kvLabels(), 7},
		{"kubevirt_vmi_memory_pgminfault_total", kvLabels(), 7000},
		{"kubevirt_vmi_storage_iops_read_total", kvLabels("drive", "rootdisk"), 10},
		{"kubevirt_vmi_storage_iops_write_total", kvLabels("drive", "rootdisk"), 20},
		{"kubevirt_vmi_storage_read_traffic_bytes_total", kvLabels("drive", "rootdisk"), 1000},
		{"kubevirt_vmi_storage_write_traffic_bytes_total", kvLabels("drive", "rootdisk"), 2000},
		{"kubevirt_vmi_storage_read_times_seconds_total", kvLabels("drive", "rootdisk"), 0.5},
		{"kubevirt_vmi_storage_write_times_seconds_total", kvLabels("drive", "rootdisk"), 0.25},
		{"kubevirt_vmi_storage_flush_requests_total", kvLabels("drive", "rootdisk"), 3},
		{"kubevirt_vmi_storage_flush_times_seconds_total", kvLabels("drive", "rootdisk"), 0.01},
		// The tap's tx is what the guest received.
		{"kubevirt_vmi_network_receive_bytes_total", kvLabels("interface", "default"), 222},
		{"kubevirt_vmi_network_transmit_bytes_total", kvLabels("interface", "default"), 111},
		{"kubevirt_vmi_network_traffic_bytes_total", kvLabels("interface", "default", "type", "rx"), 222},
		{"kubevirt_vmi_network_traffic_bytes_total", kvLabels("interface", "default", "type", "tx"), 111},
		{"kubevirt_vmi_network_receive_packets_total", kvLabels("interface", "default"), 22},
		{"kubevirt_vmi_network_transmit_packets_total", kvLabels("interface", "default"), 11},
		{"kubevirt_vmi_network_receive_errors_total", kvLabels("interface", "default"), 4},
		{"kubevirt_vmi_network_transmit_errors_total", kvLabels("interface", "default"), 3},
		{"kubevirt_vmi_network_receive_packets_dropped_total", kvLabels("interface", "default"), 2},
		{"kubevirt_vmi_network_transmit_packets_dropped_total", kvLabels("interface", "default"), 1},
		{"kubevirt_vmi_filesystem_capacity_bytes", kvLabels("disk_name", "rootdisk", "mount_point", "/", "file_system_type", "ext4"), 1 << 30},
		{"kubevirt_vmi_filesystem_used_bytes", kvLabels("disk_name", "rootdisk", "mount_point", "/", "file_system_type", "ext4"), 1 << 29},
		{"vmlet_vmi_qemu_page_faults_total", vmiOnly("kind", "minor"), 900},
		{"vmlet_vmi_qemu_page_faults_total", vmiOnly("kind", "major"), 9},
		{"vmlet_qmp_command_duration_seconds", vmiOnly("command", "query-status"), 5}, // count
		{"vmlet_qmp_command_errors_total", vmiOnly("command", "query-status"), 1},
		{"vmlet_qmp_connection_losses_total", vmiOnly(), 2},
	}
	for _, w := range want {
		k := sample{name: w.name, labels: w.labels}.key()
		s, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
			continue
		}
		if s.value != w.value {
			t.Errorf("%s = %v, want %v", k, s.value, w.value)
		}
		delete(got, k)
	}
	for k := range got {
		t.Errorf("unexpected series %s", k)
	}
}

// TestDomainStatsQMPHistogram: the launcher's cumulative buckets become the histogram's.
func TestDomainStatsQMPHistogram(t *testing.T) {
	got := read(t, DomainStats(testVMI, full()))
	s := got[sample{name: "vmlet_qmp_command_duration_seconds", labels: vmiOnly("command", "query-status")}.key()]
	if s.hist == nil {
		t.Fatal("no QMP histogram")
	}
	if s.hist.GetSampleSum() != 0.004 {
		t.Errorf("sum %v", s.hist.GetSampleSum())
	}
	want := map[float64]uint64{0.0005: 1, 0.001: 4, 0.01: 5}
	for _, b := range s.hist.GetBucket() {
		if want[b.GetUpperBound()] != b.GetCumulativeCount() {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want[b.GetUpperBound()])
		}
		delete(want, b.GetUpperBound())
	}
	if len(want) > 0 {
		t.Errorf("buckets missing: %v", want)
	}
}

// TestDomainStatsUnknownGivesNoSeries: what the launcher marks unknown (has_* false, no
// balloon, no guest statistics, a flush time it did not read, no launcher stats) gives no
// series at all, never a zero; what the launcher filled before the new fields stays.
func TestDomainStatsUnknownGivesNoSeries(t *testing.T) {
	st := full()
	for _, v := range st.Vcpus {
		v.HasDelay, v.HasWait = false, false
	}
	st.Memory.HasBalloon = false
	st.Block[0].FlushTotalTimeNs = 0 // flushes happened, their time was not read
	st.Launcher = nil
	st.Filesystems = nil
	absent := []string{"kubevirt_vmi_vcpu_delay_seconds_total", "kubevirt_vmi_vcpu_wait_seconds_total",
		"kubevirt_vmi_memory_actual_balloon_bytes", "kubevirt_vmi_storage_flush_times_seconds_total",
		"vmlet_qmp_command_duration_seconds", "vmlet_qmp_connection_losses_total",
		"kubevirt_vmi_filesystem_capacity_bytes", "kubevirt_vmi_filesystem_used_bytes"}
	got := names(read(t, DomainStats(testVMI, st)))
	for _, n := range absent {
		if got[n] {
			t.Errorf("%s exported for an unknown value", n)
		}
	}
	for _, n := range []string{"kubevirt_vmi_vcpu_seconds_total", "kubevirt_vmi_memory_available_bytes", "kubevirt_vmi_storage_flush_requests_total"} {
		if !got[n] {
			t.Errorf("%s missing", n)
		}
	}

	// Guest statistics: not reported yet, or each one unknown.
	st = full()
	st.Memory.HasGuestStats = false
	guest := []string{"kubevirt_vmi_memory_available_bytes", "kubevirt_vmi_memory_usable_bytes", "kubevirt_vmi_memory_unused_bytes",
		"kubevirt_vmi_memory_cached_bytes", "kubevirt_vmi_memory_swap_in_traffic_bytes", "kubevirt_vmi_memory_swap_out_traffic_bytes",
		"kubevirt_vmi_memory_pgmajfault_total", "kubevirt_vmi_memory_pgminfault_total"}
	got = names(read(t, DomainStats(testVMI, st)))
	for _, n := range guest {
		if got[n] {
			t.Errorf("%s exported without guest statistics", n)
		}
	}
	st = full()
	m := st.Memory
	m.HasAvailable, m.HasTotalMemory, m.HasUnused, m.HasDiskCaches, m.HasSwapIn, m.HasSwapOut, m.HasMajorFaults, m.HasMinorFaults = false, false, false, false, false, false, false, false
	got = names(read(t, DomainStats(testVMI, st)))
	for _, n := range guest {
		if got[n] {
			t.Errorf("%s exported though its has_* is false", n)
		}
	}
	if !got["kubevirt_vmi_memory_actual_balloon_bytes"] {
		t.Error("balloon size missing")
	}
}

// TestDomainStatsToday: a response as today's launcher fills it (no has_* set, no guest file
// systems, no launcher stats) gives exactly the series of the fields it fills.
func TestDomainStatsToday(t *testing.T) {
	st := &pb.DomainStatsResponse{
		Vcpus:     []*pb.VCPUStats{{Index: 0, ThreadId: 42, TimeNs: 1e9}},
		CpuUserNs: 2e9, CpuSystemNs: 1e9,
		Memory: &pb.MemoryStats{GuestBytes: 128 << 20, QemuRssBytes: 200 << 20, QemuPssBytes: 190 << 20},
		Block:  []*pb.BlockStats{{Id: "disk0", RdBytes: 1, WrBytes: 2, RdOps: 3, WrOps: 4, FlushOps: 5, RdTotalTimeNs: 6, WrTotalTimeNs: 7}},
		Net:    []*pb.NetStats{{Id: "default", RxBytes: 1, TxBytes: 2, RxPackets: 3, TxPackets: 4, RxDropped: 5, TxDropped: 6}},
	}
	got := names(read(t, DomainStats(testVMI, st)))
	want := []string{"kubevirt_vmi_cpu_usage_seconds_total", "kubevirt_vmi_cpu_user_usage_seconds_total", "kubevirt_vmi_cpu_system_usage_seconds_total",
		"kubevirt_vmi_vcpu_seconds_total", "kubevirt_vmi_memory_resident_bytes", "kubevirt_vmi_memory_domain_bytes",
		"kubevirt_vmi_storage_iops_read_total", "kubevirt_vmi_storage_iops_write_total", "kubevirt_vmi_storage_read_traffic_bytes_total",
		"kubevirt_vmi_storage_write_traffic_bytes_total", "kubevirt_vmi_storage_read_times_seconds_total", "kubevirt_vmi_storage_write_times_seconds_total",
		"kubevirt_vmi_storage_flush_requests_total",
		"kubevirt_vmi_network_traffic_bytes_total", "kubevirt_vmi_network_receive_bytes_total", "kubevirt_vmi_network_transmit_bytes_total",
		"kubevirt_vmi_network_receive_packets_total", "kubevirt_vmi_network_transmit_packets_total",
		"kubevirt_vmi_network_receive_errors_total", "kubevirt_vmi_network_transmit_errors_total",
		"kubevirt_vmi_network_receive_packets_dropped_total", "kubevirt_vmi_network_transmit_packets_dropped_total",
		"vmlet_vmi_qemu_page_faults_total"}
	for _, n := range want {
		if !got[n] {
			t.Errorf("%s missing", n)
		}
		delete(got, n)
	}
	for n := range got {
		t.Errorf("unexpected %s", n)
	}
}

// TestFamiliesCoverEverything: every series the mappings emit is of a listed family with its
// kind, and the list has no name twice.
func TestFamiliesCoverEverything(t *testing.T) {
	byName := map[string]*Family{}
	for _, f := range Families() {
		if byName[f.Name] != nil {
			t.Errorf("family %s listed twice", f.Name)
		}
		byName[f.Name] = f
	}
	ms := DomainStats(testVMI, full())
	ms = append(ms, Migration(testVMI, &pb.MigrationStatus{Role: "source", Status: "active", TotalBytes: 1, DirtyPagesRate: 1})...)
	for k, s := range read(t, ms) {
		f := byName[s.name]
		if f == nil {
			t.Errorf("%s: no family", k)
			continue
		}
		if f.Kind != s.kind {
			t.Errorf("%s: kind %v, family's %v", k, s.kind, f.Kind)
		}
	}
}
