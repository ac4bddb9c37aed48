package launcher

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// The driver has no stats calls yet: these wrap the QMP queries DomainStats needs.

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
	} `json:"stats"`
}

// blockDeviceID maps a query-blockstats entry to the disk id: its qdev path is
// "/machine/peripheral/<id>/virtio-backend" (virtio) or "<id>" / "/machine/peripheral/<id>".
func blockDeviceID(qdev string) string {
	s := strings.TrimPrefix(qdev, "/machine/peripheral/")
	s, _, _ = strings.Cut(s, "/")
	return s
}

// DomainStats implements the RPC. QMP: query-cpus-fast, query-blockstats,
// query-memory-size-summary; /proc/<pid>/stat, task/<tid>/stat, smaps_rollup; the taps'
// counters from /proc/net/dev in their namespaces.
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
		v := &pb.VCPUStats{Index: int32(c.Index), ThreadId: int32(c.ThreadID)}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, c.ThreadID)); err == nil {
			if t, err := parseStat(b); err == nil {
				v.TimeNs = t.User + t.System
			}
		}
		out.Vcpus = append(out.Vcpus, v)
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if t, err := parseStat(b); err == nil {
			out.CpuUserNs, out.CpuSystemNs = t.User, t.System
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
		})
	}
	taps := d.tapList()
	ids := make([]string, 0, len(taps))
	for id := range taps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := taps[id]
		c, err := l.tapCounters(t)
		if err != nil {
			l.log.Debug("tap counters", "nic", id, "err", err)
			continue
		}
		out.Net = append(out.Net, &pb.NetStats{
			Id: id, Tap: t.Name, RxBytes: c.RxBytes, RxPackets: c.RxPackets, RxDropped: c.RxDropped,
			TxBytes: c.TxBytes, TxPackets: c.TxPackets, TxDropped: c.TxDropped,
		})
	}
	return out, nil
}
