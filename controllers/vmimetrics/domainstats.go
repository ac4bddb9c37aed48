package vmimetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// vcpuState is the state label of kubevirt_vmi_vcpu_seconds_total. libvirt's QEMU driver
// reports every online vCPU as running (it has no blocked or offline reading from QEMU), and
// so does vmlet: each vCPU QEMU lists is online.
const vcpuState = "running"

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

// DomainStats maps one launcher's DomainStats response to the VMI's series, as KubeVirt's
// virt-handler maps libvirt's domain stats. A value the launcher marks as unknown (has_* false,
// no balloon, no guest statistics yet) gives no series.
func DomainStats(id VMI, st *pb.DomainStatsResponse) []prometheus.Metric {
	s := newSeries(id)
	s.domainStats(st)
	return s.out
}

func (s *series) domainStats(st *pb.DomainStatsResponse) {
	if st == nil {
		return
	}
	// libvirt's cpu.time/user/system: the whole QEMU process (vCPUs and emulator threads).
	s.add(CPUUsage, seconds(st.GetCpuUserNs()+st.GetCpuSystemNs()))
	s.add(CPUUser, seconds(st.GetCpuUserNs()))
	s.add(CPUSystem, seconds(st.GetCpuSystemNs()))
	for _, v := range st.GetVcpus() {
		i := strconv.Itoa(int(v.GetIndex()))
		s.add(VCPUSeconds, seconds(v.GetTimeNs()), i, vcpuState)
		if v.GetHasWait() {
			s.add(VCPUWait, seconds(v.GetWaitNs()), i)
		}
		if v.GetHasDelay() {
			s.add(VCPUDelay, seconds(v.GetDelayNs()), i)
		}
	}
	s.memory(st.GetMemory())
	for _, b := range st.GetBlock() {
		s.block(b)
	}
	for _, n := range st.GetNet() {
		s.net(n)
	}
	for _, f := range st.GetFilesystems() {
		l := []string{f.GetDiskName(), f.GetMountPoint(), f.GetType()}
		s.add(FSCapacity, float64(f.GetTotalBytes()), l...)
		s.add(FSUsed, float64(f.GetUsedBytes()), l...)
	}
	s.add(QEMUFaults, float64(st.GetQemuMinorFaults()), "minor")
	s.add(QEMUFaults, float64(st.GetQemuMajorFaults()), "major")
	s.launcher(st.GetLauncher())
}

// memory maps the memory stats. libvirt (and so KubeVirt) reads QEMU's balloon statistics as:
// stat-total-memory → "available", stat-available-memory → "usable", stat-free-memory →
// "unused", stat-disk-caches → "cached"; the balloon's actual size → "actual_balloon".
func (s *series) memory(m *pb.MemoryStats) {
	if m == nil {
		return
	}
	if m.GetQemuRssBytes() > 0 {
		s.add(MemResident, float64(m.GetQemuRssBytes()))
	}
	if m.GetGuestBytes() > 0 {
		s.add(MemDomain, float64(m.GetGuestBytes()))
	}
	if m.GetHasBalloon() {
		s.add(MemBalloon, float64(m.GetActualBalloonBytes()))
	}
	if !m.GetHasGuestStats() {
		return
	}
	for _, g := range []struct {
		f   *Family
		has bool
		v   uint64
	}{
		{MemAvailable, m.GetHasTotalMemory(), m.GetTotalMemoryBytes()}, // stat-total-memory
		{MemUsable, m.GetHasAvailable(), m.GetAvailableBytes()},        // stat-available-memory
		{MemUnused, m.GetHasUnused(), m.GetUnusedBytes()},              // stat-free-memory
		{MemCached, m.GetHasDiskCaches(), m.GetDiskCachesBytes()},      // stat-disk-caches
		{MemSwapIn, m.GetHasSwapIn(), m.GetSwapInBytes()},
		{MemSwapOut, m.GetHasSwapOut(), m.GetSwapOutBytes()},
		{MemMajFault, m.GetHasMajorFaults(), m.GetMajorFaults()},
		{MemMinFault, m.GetHasMinorFaults(), m.GetMinorFaults()},
	} {
		if g.has {
			s.add(g.f, float64(g.v))
		}
	}
}

func (s *series) block(b *pb.BlockStats) {
	d := b.GetId()
	if d == "" {
		return // KubeVirt skips a block device without a name
	}
	s.add(StorIopsRead, float64(b.GetRdOps()), d)
	s.add(StorIopsWrite, float64(b.GetWrOps()), d)
	s.add(StorReadBytes, float64(b.GetRdBytes()), d)
	s.add(StorWriteBytes, float64(b.GetWrBytes()), d)
	s.add(StorReadTimes, seconds(b.GetRdTotalTimeNs()), d)
	s.add(StorWriteTimes, seconds(b.GetWrTotalTimeNs()), d)
	s.add(StorFlushReqs, float64(b.GetFlushOps()), d)
	// The flush time has no has_* flag: flushes that took no time at all mean a launcher
	// that does not read it (blockstats flush_total_time_ns), not a fast disk.
	if b.GetFlushTotalTimeNs() > 0 || b.GetFlushOps() == 0 {
		s.add(StorFlushTimes, seconds(b.GetFlushTotalTimeNs()), d)
	}
}

// net maps a NIC's tap counters. The tap's rx is what the guest sent: libvirt swaps a tap's
// counters into the domain's view (virNetDevTapInterfaceStats), so KubeVirt's receive is the
// tap's tx and its transmit the tap's rx.
func (s *series) net(n *pb.NetStats) {
	i := n.GetId()
	if i == "" {
		return
	}
	if name, ok := s.id.Interfaces[i]; ok {
		i = name
	}
	s.add(NetTraffic, float64(n.GetTxBytes()), i, "rx")
	s.add(NetRxBytes, float64(n.GetTxBytes()), i)
	s.add(NetTraffic, float64(n.GetRxBytes()), i, "tx")
	s.add(NetTxBytes, float64(n.GetRxBytes()), i)
	s.add(NetRxPackets, float64(n.GetTxPackets()), i)
	s.add(NetTxPackets, float64(n.GetRxPackets()), i)
	s.add(NetRxErrors, float64(n.GetTxErrors()), i)
	s.add(NetTxErrors, float64(n.GetRxErrors()), i)
	s.add(NetRxDropped, float64(n.GetTxDropped()), i)
	s.add(NetTxDropped, float64(n.GetRxDropped()), i)
}

// launcher maps the launcher's own counters: QMP latency histograms (cumulative buckets, as
// Prometheus), QMP errors and connection losses.
func (s *series) launcher(l *pb.LauncherStats) {
	if l == nil {
		return
	}
	for _, q := range l.GetQmp() {
		ub, bc := q.GetUpperBoundsSeconds(), q.GetBucketCounts()
		if q.GetCommand() == "" || len(ub) != len(bc) {
			continue
		}
		buckets := make(map[float64]uint64, len(ub))
		for i, u := range ub {
			buckets[u] = bc[i]
		}
		s.addHistogram(QMPDuration, q.GetCount(), q.GetSumSeconds(), buckets, q.GetCommand())
		s.add(QMPErrors, float64(q.GetErrors()), q.GetCommand())
	}
	s.add(QMPLosses, float64(l.GetQmpConnectionLosses()))
}
