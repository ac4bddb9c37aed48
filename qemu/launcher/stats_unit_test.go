package launcher

import (
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// fsinfoReply is guest-get-fsinfo as QEMU 7.2's qemu-ga answers it (shape of the test guest
// with an ext2 on a hotplugged virtio disk, a SCSI disk and a disk vmlet did not attach).
const fsinfoReply = `[
 {"name": "vdb", "mountpoint": "/mnt/data", "type": "ext2", "used-bytes": 1081344, "total-bytes": 62898176,
  "disk": [{"serial": "", "bus-type": "virtio", "bus": 0, "unit": 0, "target": 0, "dev": "/dev/vdb",
            "pci-controller": {"bus": 3, "slot": 0, "domain": 0, "function": 0}}]},
 {"name": "sda1", "mountpoint": "/srv", "type": "ext4", "used-bytes": 10, "total-bytes": 100,
  "disk": [{"bus-type": "scsi", "bus": 0, "unit": 0, "target": 2, "dev": "/dev/sda",
            "pci-controller": {"bus": 0, "slot": 7, "domain": 0, "function": 0}}]},
 {"name": "vdc", "mountpoint": "/other", "type": "xfs",
  "disk": [{"bus-type": "virtio", "bus": 0, "unit": 0, "target": 0, "dev": "/dev/vdc", "serial": "NOT-OURS",
            "pci-controller": {"bus": 9, "slot": 0, "domain": 0, "function": 0}}]},
 {"name": "vdd", "mountpoint": "/by-serial", "type": "ext4", "used-bytes": 0, "total-bytes": 5,
  "disk": [{"bus-type": "virtio", "bus": 0, "unit": 0, "target": 0, "dev": "/dev/vdd", "serial": "LOGS-1"}]}
]`

// queryPCIReply is query-pci trimmed to what ParseQueryPCI reads: a root port with a disk
// behind it (the guest gave its secondary bus number 3), the SCSI controller on pcie.0.
const queryPCIReply = `[{"bus": 0, "devices": [
  {"bus": 0, "slot": 7, "function": 0, "qdev_id": "scsi_0", "class_info": {"class": 256}},
  {"bus": 0, "slot": 16, "function": 2, "qdev_id": "rp_3", "pci_bridge": {"bus": {"number": 0, "secondary": 3, "subordinate": 3},
    "devices": [{"bus": 3, "slot": 0, "function": 0, "qdev_id": "data1"}]}},
  {"bus": 0, "slot": 31, "function": 0, "qdev_id": ""}]}]`

func TestFilesystemStats(t *testing.T) {
	var fss []qga.FS
	if err := json.Unmarshal([]byte(fsinfoReply), &fss); err != nil {
		t.Fatal(err)
	}
	pci, err := qemu.ParseQueryPCI([]byte(queryPCIReply))
	if err != nil {
		t.Fatal(err)
	}
	wantPCI := map[qemu.PCIAddr]string{{Bus: 0, Slot: 7}: "scsi_0", {Bus: 0, Slot: 16, Function: 2}: "rp_3", {Bus: 3}: "data1"}
	if len(pci) != len(wantPCI) {
		t.Errorf("ParseQueryPCI = %v, want %v", pci, wantPCI)
	}
	for a, id := range wantPCI {
		if pci[a] != id {
			t.Errorf("ParseQueryPCI[%v] = %q, want %q", a, pci[a], id)
		}
	}
	disks := []qemu.Disk{
		{ID: "data1", Bus: qemu.BusVirtio, Port: 3},
		{ID: "logs", Bus: qemu.BusSCSI, Port: 3, Serial: "LOGS-1"}, // target 2
		{ID: "data2", Bus: qemu.BusVirtio, Port: 4},
	}
	got := fsStats(fss, pci, disks)
	want := []*pb.FilesystemStats{
		{MountPoint: "/mnt/data", Type: "ext2", DiskName: "data1", Device: "vdb", TotalBytes: 62898176, UsedBytes: 1081344},
		{MountPoint: "/srv", Type: "ext4", DiskName: "logs", Device: "sda", TotalBytes: 100, UsedBytes: 10},
		{MountPoint: "/other", Type: "xfs", Device: "vdc"},
		{MountPoint: "/by-serial", Type: "ext4", DiskName: "logs", Device: "vdd", TotalBytes: 5},
	}
	if len(got) != len(want) {
		t.Fatalf("fsStats = %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("fsStats[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// No PCI information (query-pci failed): only serials name disks.
	if got := fsStats(fss, nil, disks); got[0].GetDiskName() != "" || got[3].GetDiskName() != "logs" {
		t.Errorf("without pci: %v", got)
	}
	if got := fsStats(nil, pci, disks); got != nil {
		t.Errorf("no file systems: %v, want nil", got)
	}
}

func TestQMPStats(t *testing.T) {
	var s qmpStats
	for _, d := range []time.Duration{
		200 * time.Microsecond, 500 * time.Microsecond, // ≤ 0.5 ms (the bound is inclusive)
		700 * time.Microsecond, // ≤ 1 ms
		30 * time.Millisecond,  // ≤ 50 ms
		20 * time.Second,       // above 10 s: only in the count
	} {
		s.observe("query-status", d, nil)
	}
	s.observe("device_del", 3*time.Millisecond, &qmp.Error{Class: "DeviceNotFound"})
	s.lost()
	got := s.snapshot()
	if got.GetQmpConnectionLosses() != 1 || len(got.GetQmp()) != 2 {
		t.Fatalf("snapshot %v", got)
	}
	dd, qs := got.GetQmp()[0], got.GetQmp()[1] // sorted by name
	if dd.GetCommand() != "device_del" || dd.GetCount() != 1 || dd.GetErrors() != 1 ||
		dd.GetBucketCounts()[2] != 0 || dd.GetBucketCounts()[3] != 1 { // 2.5 ms < 3 ms ≤ 5 ms
		t.Errorf("device_del %v", dd)
	}
	wantCum := []uint64{2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4}
	if qs.GetCommand() != "query-status" || qs.GetCount() != 5 || qs.GetErrors() != 0 ||
		!equalU64(qs.GetBucketCounts(), wantCum) || len(qs.GetUpperBoundsSeconds()) != len(wantCum) {
		t.Errorf("query-status %v, want cumulative %v", qs, wantCum)
	}
	if want := 0.0002 + 0.0005 + 0.0007 + 0.03 + 20; math.Abs(qs.GetSumSeconds()-want) > 1e-9 {
		t.Errorf("sum %v, want %v", qs.GetSumSeconds(), want)
	}

	// Concurrent recording (run with -race): nothing lost.
	var c qmpStats
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c.observe([]string{"a", "b"}[(g+i)%2], time.Duration(i)*time.Microsecond, nil)
			}
		}()
	}
	wg.Wait()
	var total uint64
	for _, h := range c.snapshot().GetQmp() {
		total += h.GetCount()
	}
	if total != 8000 {
		t.Errorf("concurrent observations counted %d, want 8000", total)
	}
}

// TestQMPStatsNamesBounded: names past maxQMPCommands share one histogram.
func TestQMPStatsNamesBounded(t *testing.T) {
	var s qmpStats
	for i := range maxQMPCommands + 10 {
		s.observe(fmt.Sprintf("cmd-%d", i), time.Millisecond, &qmp.Error{Class: "CommandNotFound"})
	}
	s.observe("cmd-0", time.Millisecond, nil) // an existing name keeps its own
	got := s.snapshot().GetQmp()
	if len(got) != maxQMPCommands+1 {
		t.Fatalf("%d histograms, want %d", len(got), maxQMPCommands+1)
	}
	for _, h := range got {
		switch h.GetCommand() {
		case qmpOtherCommand:
			if h.GetCount() != 10 || h.GetErrors() != 10 {
				t.Errorf("other: %v, want 10 replies, 10 errors", h)
			}
		case "cmd-0":
			if h.GetCount() != 2 || h.GetErrors() != 1 {
				t.Errorf("cmd-0: %v, want 2 replies, 1 error", h)
			}
		}
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLostWhileRunning(t *testing.T) {
	tests := []struct {
		intent                   stopIntent
		sawShutdown, incomingPen bool
		want                     bool
	}{
		{stopNone, false, false, true},      // killed or crashed behind the launcher's back
		{stopNone, true, false, false},      // the guest powered off / quit typed on the debug socket
		{stopNone, false, true, false},      // a target whose incoming migration failed
		{stopKill, false, false, false},     // the Kill RPC
		{stopShutdown, false, false, false}, // Shutdown's forced end
		{stopMigrated, false, false, false}, // the migrated source quits
	}
	for _, tt := range tests {
		if got := lostWhileRunning(tt.intent, tt.sawShutdown, tt.incomingPen); got != tt.want {
			t.Errorf("lostWhileRunning(%v, %v, %v) = %v, want %v", tt.intent, tt.sawShutdown, tt.incomingPen, got, tt.want)
		}
	}
}

func TestBalloonStats(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	var before pb.MemoryStats
	balloonStats(&before, qemu.BalloonInfo{ActualBytes: 256 << 20, Free: u(1)}) // no report yet
	if want := (&pb.MemoryStats{HasBalloon: true, ActualBalloonBytes: 256 << 20}); !proto.Equal(&before, want) {
		t.Errorf("before the first report: %v, want %v", &before, want)
	}
	var m pb.MemoryStats
	balloonStats(&m, qemu.BalloonInfo{ActualBytes: 256 << 20, StatsUpdated: time.Unix(1764600000, 0),
		Free: u(100), Total: u(200), Available: u(150), MajorFaults: u(0), MinorFaults: u(7)})
	want := &pb.MemoryStats{HasBalloon: true, ActualBalloonBytes: 256 << 20, HasGuestStats: true,
		GuestStatsUpdatedUnix: 1764600000, UnusedBytes: 100, HasUnused: true, TotalMemoryBytes: 200, HasTotalMemory: true,
		AvailableBytes: 150, HasAvailable: true, HasMajorFaults: true, MinorFaults: 7, HasMinorFaults: true}
	if !proto.Equal(&m, want) {
		t.Errorf("balloonStats = %v, want %v", &m, want)
	}
}

// BenchmarkQMPObserve is the cost QMP latency recording adds to every command (parallel: the
// launcher's RPCs send commands concurrently).
func BenchmarkQMPObserve(b *testing.B) {
	var s qmpStats
	names := []string{"query-status", "query-cpus-fast", "query-blockstats", "qom-get"}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.observe(names[i%len(names)], time.Duration(i%5000)*time.Microsecond, nil)
			i++
		}
	})
}
