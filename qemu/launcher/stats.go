package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// The QMP queries DomainStats makes itself (the driver has calls for the balloon and PCI).

type cpuFast struct {
	Index    int `json:"cpu-index"`
	ThreadID int `json:"thread-id"`
}

type blockStat struct {
	Device string `json:"device"`
	QDev   string `json:"qdev"`
	Node   string `json:"node-name"`
	Stats  struct {
		RdBytes      uint64 `json:"rd_bytes"`
		WrBytes      uint64 `json:"wr_bytes"`
		RdOps        uint64 `json:"rd_operations"`
		WrOps        uint64 `json:"wr_operations"`
		FlushOps     uint64 `json:"flush_operations"`
		RdTotalTimeN uint64 `json:"rd_total_time_ns"`
		WrTotalTimeN uint64 `json:"wr_total_time_ns"`
		FlTotalTimeN uint64 `json:"flush_total_time_ns"`
	} `json:"stats"`
}

// blockDeviceID maps a query-blockstats entry to the disk id: its qdev path is
// "/machine/peripheral/<id>/virtio-backend" (virtio) or "<id>" / "/machine/peripheral/<id>".
func blockDeviceID(qdev string) string {
	s := strings.TrimPrefix(qdev, "/machine/peripheral/")
	s, _, _ = strings.Cut(s, "/")
	return s
}

// DomainStats implements the RPC. QMP: query-cpus-fast, query-memory-size-summary,
// query-blockstats, query-balloon and qom-get guest-stats (with a balloon), query-pci (with
// guest file systems on disks); /proc/<pid>/stat, smaps_rollup, task/<tid>/{stat,schedstat,
// sched}; the taps' counters from /proc/net/dev in their namespaces; guest-get-fsinfo from
// the guest agent (best effort, short deadline); the launcher's own QMP counters.
func (l *api) DomainStats(ctx context.Context, _ *pb.DomainStatsRequest) (*pb.DomainStatsResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	mon := d.vm.Monitor()
	pid := d.info.PID
	out := &pb.DomainStatsResponse{TimeUnixNano: time.Now().UnixNano(), Memory: &pb.MemoryStats{}}

	var cpus []cpuFast
	if err := mon.Execute(ctx, "query-cpus-fast", nil, &cpus); err != nil {
		return nil, fmt.Errorf("domain stats: %w", err)
	}
	for _, c := range cpus {
		out.Vcpus = append(out.Vcpus, vcpuStats(pid, c))
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if t, err := parseStat(b); err == nil {
			out.CpuUserNs, out.CpuSystemNs = t.User, t.System
			out.QemuMinorFaults, out.QemuMajorFaults = t.MinFlt, t.MajFlt
		}
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup"); err == nil {
		if m, err := parseSmapsRollup(b); err == nil {
			out.Memory.QemuRssBytes, out.Memory.QemuPssBytes = m.RSS, m.PSS
		}
	}
	var mem struct {
		Base uint64 `json:"base-memory"`
	}
	if err := mon.Execute(ctx, "query-memory-size-summary", nil, &mem); err != nil {
		return nil, fmt.Errorf("domain stats: %w", err)
	}
	out.Memory.GuestBytes = mem.Base
	switch b, err := d.vm.Balloon(ctx); {
	case errors.Is(err, qemu.ErrNoBalloon):
	case err != nil:
		return nil, fmt.Errorf("domain stats: %w", err)
	default:
		balloonStats(out.Memory, b)
	}

	var blocks []blockStat
	if err := mon.Execute(ctx, "query-blockstats", nil, &blocks); err != nil {
		return nil, fmt.Errorf("domain stats: %w", err)
	}
	for _, b := range blocks {
		id := blockDeviceID(b.QDev)
		if id == "" {
			continue // a node without a device (e.g. a backing file)
		}
		s := b.Stats
		out.Block = append(out.Block, &pb.BlockStats{
			Id: id, RdBytes: s.RdBytes, WrBytes: s.WrBytes, RdOps: s.RdOps, WrOps: s.WrOps,
			FlushOps: s.FlushOps, RdTotalTimeNs: s.RdTotalTimeN, WrTotalTimeNs: s.WrTotalTimeN,
			FlushTotalTimeNs: s.FlTotalTimeN,
		})
	}
	out.Net = l.netStats(d)
	out.Filesystems = l.guestFilesystems(ctx, d)
	out.Launcher = l.qstats.snapshot()
	return out, nil
}

// vcpuStats reads one vCPU thread's figures as libvirt's vcpu.N.* do: time from task stat
// (user+system), delay from schedstat's run_delay, wait from sched's wait_sum. A file or line
// the kernel does not provide leaves the has_* flag false.
func vcpuStats(pid int, c cpuFast) *pb.VCPUStats {
	v := &pb.VCPUStats{Index: int32(c.Index), ThreadId: int32(c.ThreadID)}
	task := fmt.Sprintf("/proc/%d/task/%d/", pid, c.ThreadID)
	if b, err := os.ReadFile(task + "stat"); err == nil {
		if t, err := parseStat(b); err == nil {
			v.TimeNs = t.User + t.System
		}
	}
	if b, err := os.ReadFile(task + "schedstat"); err == nil {
		if n, err := parseSchedstat(b); err == nil {
			v.DelayNs, v.HasDelay = n, true
		}
	}
	if b, err := os.ReadFile(task + "sched"); err == nil {
		if n, ok, err := parseSchedWait(b); err == nil && ok {
			v.WaitNs, v.HasWait = n, true
		}
	}
	return v
}

// balloonStats fills the balloon's part of m. Pure.
func balloonStats(m *pb.MemoryStats, b qemu.BalloonInfo) {
	m.HasBalloon, m.ActualBalloonBytes = true, b.ActualBytes
	if b.StatsUpdated.IsZero() {
		return
	}
	m.HasGuestStats, m.GuestStatsUpdatedUnix = true, b.StatsUpdated.Unix()
	set := func(v *uint64, dst *uint64, has *bool) {
		if v != nil {
			*dst, *has = *v, true
		}
	}
	set(b.Available, &m.AvailableBytes, &m.HasAvailable)
	set(b.Total, &m.TotalMemoryBytes, &m.HasTotalMemory)
	set(b.Free, &m.UnusedBytes, &m.HasUnused)
	set(b.MajorFaults, &m.MajorFaults, &m.HasMajorFaults)
	set(b.MinorFaults, &m.MinorFaults, &m.HasMinorFaults)
	set(b.SwapIn, &m.SwapInBytes, &m.HasSwapIn)
	set(b.SwapOut, &m.SwapOutBytes, &m.HasSwapOut)
	set(b.Caches, &m.DiskCachesBytes, &m.HasDiskCaches)
}

// netStats are the taps' counters, in NIC id order; a tap whose counters cannot be read is
// left out (logged at debug level).
func (l *api) netStats(d *domain) []*pb.NetStats {
	taps := d.tapList()
	ids := make([]string, 0, len(taps))
	for id := range taps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []*pb.NetStats
	for _, id := range ids {
		t := taps[id]
		c, err := l.tapCounters(t)
		if err != nil {
			l.log.Debug("tap counters", "nic", id, "err", err)
			continue
		}
		out = append(out, &pb.NetStats{
			Id: id, Tap: t.Name, RxBytes: c.RxBytes, RxPackets: c.RxPackets, RxDropped: c.RxDropped,
			TxBytes: c.TxBytes, TxPackets: c.TxPackets, TxDropped: c.TxDropped,
			RxErrors: c.RxErrors, TxErrors: c.TxErrors,
		})
	}
	return out
}
