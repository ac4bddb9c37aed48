package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestHotplugHostBlockDeviceUnderFilter runs a real launcher + QEMU inside a cgroup jail with
// vmlet's eBPF device filter: hot-plugging a host block device (a loop device made here) fails
// while the device is not granted, works once it is granted at run time, and the guest sees it.
func TestHotplugHostBlockDeviceUnderFilter(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	loop, major, minor := loopDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	rt := &process.Runtime{Binary: launcherBinary, RunRoot: runRoot, CgroupParent: cgroupParent}
	id := "devices-hotplug"
	st, err := rt.Ensure(ctx, process.Spec{
		ID: id, Name: "devices-hotplug",
		Args:  controllers.DefaultLauncherArgs(rt.Dir(id), "devhp", 5*time.Second),
		Rules: devices.Baseline(devices.BaselineOptions{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Remove(context.Background(), id); err != nil {
			t.Errorf("remove launcher: %v", err)
		}
	})
	eventually(t, time.Minute, "launcher ready", func() (bool, string) {
		s, err := rt.State(id)
		return err == nil && s.Ready, "starting"
	})
	c, err := launcher.Dial(ctx, rt.Socket(id))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := &qemu.Spec{Name: "devhp", MemoryMiB: 128, HotplugPorts: 2, TCGCacheMiB: 32, Serial: &qemu.Serial{},
		Boot: qemu.Boot{Kernel: files.Kernel, Initrd: files.Initrd, Cmdline: testguest.BaseCmdline}}
	if _, err := c.Sync(ctx, launcher.SpecToProto(spec, nil)); err != nil {
		t.Fatal(err)
	}
	serial := filepath.Join(rt.Dir(id), "logs", "serial.log")
	waitSerial(t, serial, testguest.MarkerReady)

	disk := &pb.Disk{Id: "hostblk", Path: loop, Format: "raw"}
	if err := c.HotplugDisk(ctx, disk); err == nil {
		t.Fatalf("hot-plugging %s without a grant succeeded; the filter does not hold", loop)
	} else {
		t.Logf("without a grant: %v", err)
	}
	f, err := devices.Recover(filepath.Join(cgroupParent, "vmlet-"+id))
	if err != nil {
		t.Fatalf("recover the launcher's filter: %v", err)
	}
	defer f.Close()
	rule := devices.DiskRule(devices.Disk{Major: major, Minor: minor})
	if err := f.Grant(rule); err != nil {
		t.Fatal(err)
	}
	if err := c.HotplugDisk(ctx, disk); err != nil {
		t.Fatalf("hot-plug after the grant: %v", err)
	}
	waitSerial(t, serial, testguest.MarkerDiskAdded)
	if err := c.UnplugDisk(ctx, "hostblk"); err != nil {
		t.Fatalf("unplug: %v", err)
	}
	waitSerial(t, serial, testguest.MarkerDiskRemoved)
	if err := f.Revoke(rule); err != nil {
		t.Fatal(err)
	}
	if err := c.HotplugDisk(ctx, disk); err == nil {
		t.Fatal("hot-plug after the revoke succeeded")
	}
	_ = st
}

// loopDevice attaches a small file to a free loop device and returns its path and numbers.
func loopDevice(t *testing.T) (string, int64, int64) {
	t.Helper()
	dev := loopdev.Attach(t, filepath.Join(t.TempDir(), "blk.img"), "", 8<<20)
	major, minor := loopdev.Numbers(t, dev)
	return dev, major, minor
}

// waitSerial waits until the serial log contains marker (each marker appears once per test).
func waitSerial(t *testing.T, path, marker string) {
	t.Helper()
	eventually(t, 2*time.Minute, strconv.Quote(marker)+" on the serial console", func() (bool, string) {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), marker), tail(b)
	})
}
