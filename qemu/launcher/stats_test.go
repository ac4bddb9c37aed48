package launcher_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/poll"
)

// The test guest mounts only pseudo and memory file systems (proc, sysfs, devtmpfs, tmpfs),
// which qemu-ga's guest-get-fsinfo leaves out, so DomainStats reports no file system until
// a test makes one on a disk.
//
// diskFilesystem formats the hotplugged disk dev (the overlay of data1) with ext2 in the
// guest, mounts it on /mnt/data and checks that DomainStats reports it on disk data1 with its
// size and usage; it unmounts before returning (the disk is unplugged next).
func diskFilesystem(ctx context.Context, t *testing.T, p *proc, dev string) {
	t.Helper()
	st, err := p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetFilesystems()) != 0 {
		t.Errorf("file systems before any disk is mounted: %v, want none", st.GetFilesystems())
	}
	run := func(cmd string) {
		t.Helper()
		r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 0)
		if err != nil || r.GetExitCode() != 0 {
			t.Fatalf("guest %q: %v exit %d: %s%s", cmd, err, r.GetExitCode(), r.GetStdout(), r.GetStderr())
		}
	}
	run("mke2fs -q " + dev + " && mkdir -p /mnt/data && mount -t ext2 " + dev + " /mnt/data && " +
		"head -c 1048576 /dev/zero >/mnt/data/one-mib && sync")
	st, err = p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.GetFilesystems(), func(f *pb.FilesystemStats) bool { return f.GetMountPoint() == "/mnt/data" })
	if i < 0 {
		t.Fatalf("file systems %v lack /mnt/data", st.GetFilesystems())
	}
	f := st.GetFilesystems()[i]
	t.Logf("guest file systems: %v", st.GetFilesystems())
	// 64 MiB disk: ext2 leaves most of it usable; 1 MiB was written.
	if f.GetType() != "ext2" || f.GetDiskName() != "data1" || f.GetDevice() != strings.TrimPrefix(dev, "/dev/") ||
		f.GetTotalBytes() < 50<<20 || f.GetTotalBytes() > 64<<20 || f.GetUsedBytes() < 1<<20 || f.GetUsedBytes() >= f.GetTotalBytes() {
		t.Errorf("/mnt/data = %v, want ext2 on disk data1 (%s), 50–64 MiB with ≥ 1 MiB used", f, dev)
	}
	run("umount /mnt/data")
}

// balloonStats waits (deadline) for the balloon's first guest report and checks its figures
// against the guest's 256 MiB; it returns the report's time.
func balloonStats(t *testing.T, p *proc) int64 {
	return balloonStatsAfter(t, p, 0)
}

// balloonStatsAfter is balloonStats for a report newer than after (unix seconds): on a
// migration target, proof that the balloon polls there too.
func balloonStatsAfter(t *testing.T, p *proc, after int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const guest = 256 << 20
	var m *pb.MemoryStats
	poll.Until(t, 45*time.Second, "the balloon's first guest memory report", func() (bool, string) {
		st, err := p.client.DomainStats(ctx)
		if err != nil {
			return false, err.Error()
		}
		m = st.GetMemory()
		return m.GetHasGuestStats() && m.GetGuestStatsUpdatedUnix() > after, m.String()
	})
	t.Logf("balloon: %v", m)
	if !m.GetHasBalloon() || m.GetActualBalloonBytes() != guest {
		t.Errorf("balloon actual %d (has %v), want the guest's %d", m.GetActualBalloonBytes(), m.GetHasBalloon(), guest)
	}
	if !m.GetHasUnused() || !m.GetHasTotalMemory() || !m.GetHasAvailable() ||
		m.GetUnusedBytes() == 0 || m.GetUnusedBytes() >= m.GetTotalMemoryBytes() || m.GetTotalMemoryBytes() > guest ||
		m.GetAvailableBytes() == 0 || m.GetAvailableBytes() > m.GetTotalMemoryBytes() {
		t.Errorf("guest stats %v: want 0 < unused < usable <= %d and 0 < available <= usable", m, guest)
	}
	if age := time.Since(time.Unix(m.GetGuestStatsUpdatedUnix(), 0)); age < -time.Minute || age > time.Minute {
		t.Errorf("guest stats updated %s ago", age)
	}
	return m.GetGuestStatsUpdatedUnix()
}
