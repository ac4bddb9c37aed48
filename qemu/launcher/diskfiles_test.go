package launcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestHandedDisks: disks whose Path does not exist in the launcher's view start (Sync) and
// hotplug (HotplugDisk) from image files the agent handed over (HandOverDisk); of two
// hand-overs of one disk the second wins; the launcher keeps no copy once QEMU has its own;
// a disk without handed files is still opened by path (and fails here).
func TestHandedDisks(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	rec := watch(t, p.client, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sock := p.paths.TapSocket()
	const replaced, cold, hot = "VMLET-REPLACED", "VMLET-COLD-HANDED", "VMLET-HOT-HANDED"
	imgs := map[string]string{}
	for _, label := range []string{replaced, cold, hot} {
		imgs[label] = labelImage(t, label)
	}
	handOver(ctx, t, sock, "cold", imgs[replaced])
	handOver(ctx, t, sock, "cold", imgs[cold])

	spec := guestSpec(t, "handed")
	spec.Disks = []*pb.Disk{{Id: "cold", Path: "/nonexistent/vmlet/cold.img", Format: "raw", Cache: "none"}}
	_, con := syncGuest(t, p, spec)
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	if got := guestRead(ctx, t, p, "/dev/vda", len(cold)); got != cold {
		t.Errorf("cold-plugged handed disk reads %q, want %q (the second hand-over)", got, cold)
	}

	handOver(ctx, t, sock, "hot", imgs[hot])
	from, off := rec.len(), con.Len()
	if err := p.client.HotplugDisk(ctx, &pb.Disk{Id: "hot", Path: "/nonexistent/vmlet/hot.img", Format: "raw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, from, "disk added", isDevice(pb.DeviceEvent_ACTION_ADDED, "hot")); err != nil {
		t.Fatal(err)
	}
	if _, err := con.WaitFrom(ctx, off, testguest.MarkerDiskAdded+" vdb"); err != nil {
		t.Fatal(err)
	}
	if got := guestRead(ctx, t, p, "/dev/vdb", len(hot)); got != hot {
		t.Errorf("hotplugged handed disk reads %q, want %q", got, hot)
	}
	for label, img := range imgs {
		if fds := fdsOn(t, p.cmd.Process.Pid, img); fds > 0 {
			t.Errorf("the launcher still holds %d fds of %s", fds, label)
		}
	}
	if err := p.client.HotplugDisk(ctx, &pb.Disk{Id: "nofiles", Path: "/nonexistent/vmlet/nofiles.img"}); err == nil {
		t.Error("hotplug of a disk with neither handed files nor an existing path succeeded")
	}
	if err := p.client.UnplugDisk(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
}

// handOver hands disk id a read-write file of img, as the node agent does.
func handOver(ctx context.Context, t *testing.T, sock, id, img string) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // the launcher has its own copy
	if err := launcher.HandOverDisk(ctx, sock, id, []*os.File{f}); err != nil {
		t.Fatal(err)
	}
}

// labelImage writes a 1 MiB raw image that starts with label.
func labelImage(t *testing.T, label string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "image.raw")
	if err := os.WriteFile(img, []byte(label), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	return img
}

// guestRead reads the first n bytes of dev in the guest (guest agent).
func guestRead(ctx context.Context, t *testing.T, p *proc, dev string, n int) string {
	t.Helper()
	r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", fmt.Sprintf("head -c %d %s", n, dev)}, nil, 0)
	if err != nil {
		t.Fatalf("read %s in the guest: %v", dev, err)
	}
	return string(r.GetStdout())
}

// fdsOn counts the fds of process pid open on path.
func fdsOn(t *testing.T, pid int, path string) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}
