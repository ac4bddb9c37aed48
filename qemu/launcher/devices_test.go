package launcher_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// hotplugDisk attaches an overlay of the data disk, checks the guest sees it and the events,
// then unplugs it.
func hotplugDisk(t *testing.T, p *proc, rec *recorder, con *testguest.Console) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	disk := &pb.Disk{Id: "data1", Path: testguest.Overlay(t, testguest.Assets(t).DataDisk), Format: "qcow2"}
	from, off := rec.len(), con.Len()
	if err := p.client.HotplugDisk(ctx, disk); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, from, "disk added", isDevice(pb.DeviceEvent_ACTION_ADDED, "data1")); err != nil {
		t.Fatal(err)
	}
	line, _, err := con.WaitLine(ctx, off, testguest.MarkerDiskAdded+" vd")
	if err != nil {
		t.Fatal(err)
	}
	// The guest reads the disk (through the agent), so the block counters must move.
	dev := "/dev/" + strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, testguest.MarkerDiskAdded):], testguest.MarkerDiskAdded))
	if _, err := rec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", "head -c 15 " + dev}, nil, 0)
	if err != nil || string(r.GetStdout()) != testguest.DataDiskLabel {
		t.Fatalf("read %s in the guest: %q %v", dev, r.GetStdout(), err)
	}
	if err := p.client.HotplugDisk(ctx, disk); !errors.Is(err, launcher.ErrDeviceExists) {
		t.Errorf("second hotplug of data1: %v, want ErrDeviceExists", err)
	}
	d, err := p.client.GetDomain(ctx)
	if err != nil || !slices.Contains(d.GetDisks(), "data1") {
		t.Errorf("GetDomain disks %v (%v), want data1", d.GetDisks(), err)
	}
	if i := slices.IndexFunc(d.GetLiveSpec().GetDisks(), func(x *pb.Disk) bool { return x.GetId() == "data1" }); i < 0 ||
		d.GetLiveSpec().GetDisks()[i].GetPort() == 0 {
		t.Errorf("live spec lacks data1 with a pinned port: %v", d.GetLiveSpec().GetDisks())
	}
	st, err := p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(st.GetBlock(), func(b *pb.BlockStats) bool { return b.GetId() == "data1" }); i < 0 {
		t.Errorf("block stats lack data1: %v", st.GetBlock())
	} else if st.GetBlock()[i].GetRdBytes() == 0 {
		t.Errorf("data1 read 0 bytes although the guest read it: %v", st.GetBlock()[i])
	}
	diskFilesystem(ctx, t, p, dev)
	from, off = rec.len(), con.Len()
	if err := p.client.UnplugDisk(ctx, "data1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, from, "disk removed", isDevice(pb.DeviceEvent_ACTION_REMOVED, "data1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := con.WaitLine(ctx, off, testguest.MarkerDiskRemoved+" vd"); err != nil {
		t.Fatal(err)
	}
	if err := p.client.UnplugDisk(ctx, "data1"); !errors.Is(err, launcher.ErrUnknownDevice) {
		t.Errorf("second unplug of data1: %v, want ErrUnknownDevice", err)
	}
}

// testNetns creates a network namespace with a tap in it (removed by Cleanup) and returns the
// namespace's path and the tap's name.
func testNetns(t *testing.T) (string, string) {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := "vmlet-lt-" + hex.EncodeToString(b)
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() }) // best-effort cleanup
	run("-n", ns, "tuntap", "add", "dev", "vt0", "mode", "tap", "vnet_hdr")
	run("-n", ns, "link", "set", "vt0", "up")
	return "/var/run/netns/" + ns, "vt0"
}

// tapErrors reads the tap's error counters (rx errs, tx errs columns of /proc/net/dev) in
// its namespace, independently of the launcher (ip netns exec).
func tapErrors(t *testing.T, netns, tap string) (rx, tx uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", filepath.Base(netns), "cat", "/proc/net/dev").Output()
	if err != nil {
		t.Fatalf("read /proc/net/dev in %s: %v", netns, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if f := strings.Fields(rest); ok && strings.TrimSpace(name) == tap && len(f) >= 11 {
			rx, _ = strconv.ParseUint(f[2], 10, 64)
			tx, _ = strconv.ParseUint(f[10], 10, 64)
			return rx, tx
		}
	}
	t.Fatalf("no %s in %s's /proc/net/dev:\n%s", tap, netns, out)
	return 0, 0
}

// hotplugNIC attaches a NIC on a tap in a test-made netns, checks guest, events and stats,
// then unplugs it (first while the guest is paused: pending).
func hotplugNIC(t *testing.T, p *proc, rec *recorder, con *testguest.Console) {
	netns, tap := testNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	from, off := rec.len(), con.Len()
	nic := &pb.NIC{Id: "net1", Mac: "52:54:00:12:34:99", TapName: tap, Netns: netns}
	if err := p.client.HotplugNIC(ctx, nic); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, from, "nic added", isDevice(pb.DeviceEvent_ACTION_ADDED, "net1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := con.WaitLine(ctx, off, testguest.MarkerNICAdded+" eth"); err != nil {
		t.Fatal(err)
	}
	st, err := p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(st.GetNet(), func(n *pb.NetStats) bool { return n.GetId() == "net1" }); i < 0 || st.GetNet()[i].GetTap() != tap {
		t.Errorf("net stats lack net1 on %s: %v", tap, st.GetNet())
	} else if rx, tx := tapErrors(t, netns, tap); st.GetNet()[i].GetRxErrors() != rx || st.GetNet()[i].GetTxErrors() != tx {
		t.Errorf("net1 errors rx %d tx %d, the kernel says rx %d tx %d", st.GetNet()[i].GetRxErrors(), st.GetNet()[i].GetTxErrors(), rx, tx)
	}
	d, err := p.client.GetDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(d.GetLiveSpec().GetNics(), func(n *pb.NIC) bool { return n.GetId() == "net1" }); i < 0 ||
		d.GetLiveSpec().GetNics()[i].GetTapName() != tap || d.GetLiveSpec().GetNics()[i].GetNetns() != netns {
		t.Errorf("live spec NICs %v, want net1 on %s in %s", d.GetLiveSpec().GetNics(), tap, netns)
	}
	bad := &pb.NIC{Id: "net2", Mac: "52:54:00:12:34:98", TapName: "nosuchtap", Netns: netns}
	if err := p.client.HotplugNIC(ctx, bad); !errors.Is(err, launcher.ErrTapNotFound) {
		t.Errorf("hotplug on a missing tap: %v, want ErrTapNotFound", err)
	}
	// A guest that cannot release the NIC in time (its vCPUs stopped): the unplug is pending,
	// said as ErrUnplugPending; once it runs again, the next UnplugNIC completes it.
	from, off = rec.len(), con.Len()
	if _, err := p.client.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	err = p.client.UnplugNIC(short, "net1")
	cancelShort()
	if !errors.Is(err, launcher.ErrUnplugPending) {
		t.Errorf("UnplugNIC with the guest paused = %v, want ErrUnplugPending", err)
	}
	if _, err := p.client.Unpause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.client.UnplugNIC(ctx, "net1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, from, "nic removed", isDevice(pb.DeviceEvent_ACTION_REMOVED, "net1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := con.WaitLine(ctx, off, testguest.MarkerNICRemoved+" eth"); err != nil {
		t.Fatal(err)
	}
}

// domainStats checks the counters of a running guest.
func domainStats(t *testing.T, p *proc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetVcpus()) != 1 || st.GetVcpus()[0].GetThreadId() == 0 || st.GetVcpus()[0].GetTimeNs() == 0 {
		t.Errorf("vcpus %v, want one with a thread and cpu time", st.GetVcpus())
	}
	if st.GetCpuUserNs()+st.GetCpuSystemNs() == 0 {
		t.Errorf("qemu cpu time 0")
	}
	if m := st.GetMemory(); m.GetGuestBytes() != 256<<20 || m.GetQemuRssBytes() == 0 || m.GetQemuPssBytes() == 0 {
		t.Errorf("memory %v, want 256 MiB guest and a non-zero RSS/PSS", m)
	}
	if st.GetQemuMinorFaults() == 0 {
		t.Errorf("qemu minor faults 0: QEMU touched its guest RAM, it must have faulted")
	}
	// vCPU delay and wait exactly when the kernel provides them (schedstat; sched's wait_sum).
	_, errDelay := os.Stat("/proc/self/schedstat")
	sched, _ := os.ReadFile("/proc/self/sched")
	wantWait := strings.Contains(string(sched), "wait_sum")
	for _, v := range st.GetVcpus() {
		t.Logf("vcpu: %v; qemu faults minor %d major %d", v, st.GetQemuMinorFaults(), st.GetQemuMajorFaults())
		if v.GetHasDelay() != (errDelay == nil) || v.GetHasWait() != wantWait || (!v.GetHasWait() && v.GetWaitNs() != 0) {
			t.Errorf("vcpu %v: want has_delay %v, has_wait %v", v, errDelay == nil, wantWait)
		}
	}
	qmpHistograms(t, st.GetLauncher())
	balloonStats(t, p)
}

// qmpHistograms checks the launcher's QMP latency histograms: query-status (the launcher's
// own refreshes) and the stats queries were timed, buckets are cumulative and end at most at
// the count, the bounds go from 0.5 ms to 10 s.
func qmpHistograms(t *testing.T, ls *pb.LauncherStats) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range ls.GetQmp() {
		seen[c.GetCommand()] = true
		if c.GetCommand() == "query-status" {
			t.Logf("qmp histogram: %v", c)
		}
		b, n := c.GetUpperBoundsSeconds(), c.GetBucketCounts()
		if len(b) != len(n) || len(b) == 0 || b[0] != 0.0005 || b[len(b)-1] != 10 || c.GetCount() == 0 || c.GetSumSeconds() <= 0 {
			t.Errorf("histogram %v: want bounds 0.5 ms … 10 s, a count and a sum", c)
			continue
		}
		for i := range n {
			if (i > 0 && (n[i] < n[i-1] || b[i] <= b[i-1])) || n[i] > c.GetCount() {
				t.Errorf("histogram %s not cumulative: bounds %v counts %v count %d", c.GetCommand(), b, n, c.GetCount())
				break
			}
		}
		if c.GetErrors() > c.GetCount() {
			t.Errorf("histogram %s: %d errors of %d replies", c.GetCommand(), c.GetErrors(), c.GetCount())
		}
	}
	for _, cmd := range []string{"qmp_capabilities", "query-status", "query-cpus-fast", "query-blockstats", "cont"} {
		if !seen[cmd] {
			t.Errorf("no QMP histogram for %s (have %v)", cmd, seen)
		}
	}
	if ls.GetQmpConnectionLosses() != 0 {
		t.Errorf("qmp connection losses %d on a healthy domain", ls.GetQmpConnectionLosses())
	}
}
