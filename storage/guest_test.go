package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestGuestSeesVolumes is the end-to-end proof: the test guest boots from a kernelBoot image
// pulled over the registry protocol, and sees a containerDisk overlay (pulled the same way), an
// emptyDisk, a hostDisk (DiskOrCreate) and a cloud-init NoCloud ISO whose user-data it mounts and
// reads; an emptyDisk added by a second Apply is hotplugged. Guest writes land in the overlay
// (the cached base is unchanged) and in the host disk (still there after Cleanup).
func TestGuestSeesVolumes(t *testing.T) {
	e := newEnv(t)
	files := testguest.Assets(t)
	// The guest loads no filesystem modules: isofs (and cdrom, which it needs) ride along in an
	// extra initramfs archive inside the kernelBoot image.
	initrd := storagetest.ExtendInitrd(t, files.Initrd, storagetest.GuestModules(t, files, "cdrom", "isofs"))
	kref := e.reg.Push(t, "vm/kernel:v1", storagetest.KernelBoot(t, files.Kernel, initrd))
	dref := e.reg.Push(t, "vm/data-disk:v1", storagetest.ContainerDisk(t, files.DataDisk))
	userData := fmt.Sprintf("#cloud-config\n# VMLET-USER-DATA %d\n", time.Now().UnixNano())
	hostDisk := filepath.Join(e.hdRoot, "vm1", "disk.img")
	if err := os.MkdirAll(filepath.Dir(hostDisk), 0o755); err != nil {
		t.Fatal(err)
	}

	opts := e.opts()
	opts.KernelBoot = &KernelBoot{Image: kref, KernelPath: storagetest.KernelPath, InitrdPath: storagetest.InitrdPath}
	volumes := []Volume{
		{Name: "root", ContainerDisk: &ContainerDisk{Image: dref}},
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 64 << 20}},
		{Name: "host", HostDisk: &HostDisk{Path: hostDisk, Type: HostDiskOrCreate, CapacityBytes: 32 << 20}},
		{Name: "cloudinit", CloudInitNoCloud: &cloudinit.Source{UserData: userData}},
	}
	disks := []DiskRequest{{Name: "root", Serial: "root"}, {Name: "scratch", Serial: "scratch"},
		{Name: "host", Serial: "host"}, {Name: "cloudinit", Serial: "cidata"}}
	p, err := Plan(volumes, disks, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.host.Apply(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	base := info(t, res.Disks[0].Path).BackingFilename
	baseSum := fileSum(t, base)

	g := bootGuest(t, res, 1)
	dev := g.devBySerial(t)
	t.Logf("guest devices by serial: %v", dev)
	for _, s := range []string{"root", "scratch", "host", "cidata"} {
		if dev[s] == "" {
			t.Fatalf("no guest disk with serial %s: %v", s, dev)
		}
	}
	if got := g.sh(t, "head -c 15 /dev/"+dev["root"]); got != testguest.DataDiskLabel {
		t.Errorf("containerDisk reads %q, want %q", got, testguest.DataDiskLabel)
	}
	for s, size := range map[string]int64{"scratch": 64 << 20, "host": 32 << 20} {
		if got := g.sh(t, "cat /sys/block/"+dev[s]+"/size"); got != strconv.FormatInt(size/512, 10) {
			t.Errorf("%s disk has %s sectors, want %d", s, got, size/512)
		}
	}
	g.sh(t, "echo VMLET-GUEST-WROTE | dd of=/dev/"+dev["root"]+" bs=512 seek=2048 conv=notrunc 2>/dev/null; "+
		"echo VMLET-HOST-DISK | dd of=/dev/"+dev["host"]+" conv=notrunc 2>/dev/null; sync")
	mount := g.sh(t, "grep -q iso9660 /proc/filesystems || { insmod "+storagetest.GuestModuleDir+"/cdrom.ko; insmod "+
		storagetest.GuestModuleDir+"/isofs.ko; }; mount -t iso9660 -o ro /dev/"+dev["cidata"]+" /mnt && ls -1 /mnt && cat /mnt/user-data")
	if want := "meta-data\nuser-data\n" + strings.TrimSpace(userData); mount != want {
		t.Errorf("cloud-init disk in the guest:\n%s\nwant:\n%s", mount, want)
	}
	if got := g.sh(t, "cat /mnt/meta-data"); got != `{"instance-id":"vm1.default","local-hostname":"vm1"}` {
		t.Errorf("meta-data in the guest: %q", got)
	}

	// A second Apply with one more volume keeps the running VM's disks and adds the new one,
	// which the guest sees when hotplugged.
	volumes = append(volumes, Volume{Name: "hot", EmptyDisk: &EmptyDisk{CapacityBytes: 16 << 20}})
	p2, err := Plan(volumes, append(disks, DiskRequest{Name: "hot", Serial: "hot"}), opts)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := e.host.Apply(ctxT(t), p2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	from := g.console.Len()
	if err := g.AddDisk(ctx, res2.Disks[len(res2.Disks)-1]); err != nil {
		t.Fatal(err)
	}
	line, _, err := g.console.WaitLine(ctx, from, testguest.MarkerDiskAdded+" ")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, testguest.MarkerDiskAdded):], testguest.MarkerDiskAdded))
	if got := g.sh(t, "echo $(cat /sys/block/"+name+"/serial) $(cat /sys/block/"+name+"/size)"); got != "hot "+strconv.Itoa(16<<20/512) {
		t.Errorf("hotplugged disk %s: %q", name, got)
	}

	if err := g.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, base) != baseSum {
		t.Error("the cached containerDisk base changed: guest writes must go to the overlay")
	}
	flat := filepath.Join(t.TempDir(), "root.raw")
	run(t, "qemu-img", "convert", "-U", "-O", "raw", res.Disks[0].Path, flat)
	if b, err := os.ReadFile(flat); err != nil || !bytes.HasPrefix(b[1<<20:], []byte("VMLET-GUEST-WROTE")) {
		t.Errorf("guest write not in the overlay (%v)", err)
	}
	if fileSum(t, res.Boot.Kernel) != fileSum(t, files.Kernel) || !strings.HasPrefix(res.Boot.Kernel, e.vmDir+"/") {
		t.Errorf("booted kernel %s is not the pulled image's", res.Boot.Kernel)
	}
	if err := Cleanup(e.vmDir); err != nil {
		t.Fatal(err)
	}
	if exists(e.vmDir) {
		t.Error("vm folder still there after Cleanup")
	}
	b, err := os.ReadFile(hostDisk)
	if err != nil || !bytes.HasPrefix(b, []byte("VMLET-HOST-DISK")) {
		t.Errorf("host disk after Cleanup: %v, starts with %q", err, b[:min(len(b), 16)])
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
