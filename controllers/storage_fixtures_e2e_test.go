package controllers_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// Images of KubeVirt's storage examples. These machines cannot reach registry:5000: the agent
// pulls them from an in-process registry (its image sources map the names), which serves
// images built from the test guest under the same repository names.
const (
	cirrosImage = "registry:5000/kubevirt/cirros-container-disk-demo:devel"
	alpineImage = "registry:5000/kubevirt/alpine-ext-kernel-boot-demo:devel"
)

// TestKubeVirtStorageFixtures runs KubeVirt's vmi-ephemeral, vmi-nocloud, vmi-host-disk,
// vmi-kernel-boot and vmi-sata examples exactly as written (only apiVersion changed): each
// reaches Running, QMP query-block shows every disk with the image storage made for it, and the
// booted guest proves what it can.
//
// The cirros containerDisk is served as a BIOS-bootable disk of the test guest (ext2 + EXTLINUX,
// test/assets/bootdisk): the fixtures without a kernelBoot boot it through QEMU's BIOS as cirros
// would, and their guest reads its boot disk's label, mounts vmi-nocloud's NoCloud disk and reads
// the fixture's user data, and sees the 2Gi emptyDisk. A guest write to the ephemeral boot disk
// lands in the overlay (the cached image is unchanged). vmi-kernel-boot's image carries the test
// guest's kernel and initramfs at the alpine paths; its guest checks the command line and the
// 1Gi of memory. vmi-host-disk has nothing bootable (a blank 1Gi host disk): its BIOS finds
// nothing to boot, so it is Running at the QEMU level only, and QMP proves the disk.
//
// vmi-host-disk's hostDisk is /var/data/disk.img (DiskOrCreate): the test lets the agent create
// it, checks it survives the VMI (KubeVirt semantics), and removes it.
//
// Times to Running (and to the guest's ready marker) are logged for a cold image cache (first
// VMI of an image) and a warm one.
func TestKubeVirtStorageFixtures(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	reg := storagetest.StartRegistry(t)
	kernelBoot, err := images.KernelBoot(files.Kernel, "/boot/vmlinuz-virt", files.Initrd, "/boot/initramfs-virt")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{
		cirrosImage: reg.Push(t, "kubevirt/cirros-container-disk-demo:devel", storagetest.ContainerDisk(t, bootDisk(t))),
		alpineImage: reg.Push(t, "kubevirt/alpine-ext-kernel-boot-demo:devel", kernelBoot),
	}
	const hostDisk = "/var/data/disk.img"
	ownVarData(t, hostDisk)
	cache := nodeDir(t) // starts cold: the first VMI of each image pulls it
	a := startAgent(t, agentOptions{ImageSources: sources, HostDiskRoot: filepath.Dir(hostDisk), ImageCache: cache})
	defer a.stop(t)

	// cirros checks the boot disk: the overlay over the cached image, booted by the BIOS (the
	// command line is the disk's extlinux.conf), its label read by the guest.
	cirros := func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) qmpBlock {
		t.Helper()
		d := checkBlock(t, b, "containerdisk", filepath.Join(volumeRoot, string(v.UID), "disks", "containerdisk.qcow2"), "qcow2", 64<<20)
		if bi := d.Inserted.Image.BackingImage; bi == nil || !strings.HasPrefix(bi.Filename, cache+"/") {
			t.Fatalf("containerdisk overlay is not over the cached image: %+v", bi)
		}
		guestReady(t, v)
		if got := guestRun(t, c, "cat /proc/cmdline"); got != "BOOT_IMAGE=/vmlinuz console=ttyS0 quiet panic=-1 initrd=/initramfs.gz" {
			t.Errorf("guest command line %q, want EXTLINUX's from the boot disk", got)
		}
		if got := guestRun(t, c, "dd if=/dev/vda bs=1 skip=1144 count=9 2>/dev/null"); got != "vmletboot" {
			t.Errorf("the guest's vda has label %q, want the boot disk's", got)
		}
		return d
	}
	tests := []struct {
		file  string
		cache string // "cold" or "warm": the image is (not) in the cache yet
		check func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock)
	}{
		{file: "vmi-ephemeral.yaml", cache: "cold", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) {
			base := cirros(t, v, c, b).Inserted.Image.BackingImage.Filename
			before := fileSum(t, base)
			guestRun(t, c, "printf VMLET-EPHEMERAL-WRITE | dd of=/dev/vda bs=512 seek=120000 conv=notrunc 2>/dev/null; sync")
			if fileSum(t, base) != before {
				t.Error("a guest write changed the cached containerDisk")
			}
			if got := guestRun(t, c, "echo 3 > /proc/sys/vm/drop_caches; dd if=/dev/vda bs=512 skip=120000 count=1 2>/dev/null | head -c 21"); got != "VMLET-EPHEMERAL-WRITE" {
				t.Errorf("the guest reads back %q", got)
			}
		}},
		{file: "vmi-ephemeral.yaml", cache: "warm", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) {
			cirros(t, v, c, b)
			if got := guestRun(t, c, "dd if=/dev/vda bs=512 skip=120000 count=1 2>/dev/null | head -c 21"); got == "VMLET-EPHEMERAL-WRITE" {
				t.Error("the previous VMI's write is in this VMI's containerDisk")
			}
		}},
		{file: "vmi-nocloud.yaml", cache: "warm", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) {
			cirros(t, v, c, b)
			iso := checkBlock(t, b, "cloudinitdisk", filepath.Join(volumeRoot, string(v.UID), "disks", "cloudinitdisk.iso"), "raw", -1)
			userData := v.Spec.Volumes[1].CloudInitNoCloud.UserData
			if label, files, err := cloudinit.ReadISO(iso.Inserted.File); err != nil || label != cloudinit.LabelNoCloud || string(files["user-data"]) != userData {
				t.Errorf("the ISO QEMU has open: label %q, user-data %q (%v)", label, files["user-data"], err)
			}
			checkBlock(t, b, "emptydisk", filepath.Join(volumeRoot, string(v.UID), "disks", "emptydisk.qcow2"), "qcow2", 2<<30)
			// Disks in the fixture's order: vda containerdisk, vdb cloudinitdisk, vdc emptydisk.
			if got := guestRun(t, c, "mount -t iso9660 -o ro /dev/vdb /mnt && ls /mnt && cat /mnt/user-data"); got != "meta-data\nuser-data\n"+strings.TrimSpace(userData) {
				t.Errorf("NoCloud disk in the guest:\n%s\nwant the fixture's user data:\n%s", got, userData)
			}
			if got := guestRun(t, c, "cat /sys/block/vdc/size"); got != strconv.Itoa(2<<30/512) {
				t.Errorf("emptydisk in the guest has %s sectors", got)
			}
		}},
		{file: "vmi-host-disk.yaml", cache: "none", check: func(t *testing.T, _ *vmletv1.VirtualMachineInstance, _ *launcher.Client, b map[string]qmpBlock) {
			checkBlock(t, b, "host-disk", hostDisk, "raw", 1<<30)
		}},
		{file: "vmi-kernel-boot.yaml", cache: "cold", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) {
			guestReady(t, v)
			if got := guestRun(t, c, "cat /proc/cmdline"); got != "console=ttyS0" {
				t.Errorf("guest kernel command line %q", got)
			}
			kb, err := strconv.Atoi(guestRun(t, c, "awk '/MemTotal/ {print $2}' /proc/meminfo"))
			if err != nil || kb < 900<<10 || kb > 1<<20 {
				t.Errorf("guest MemTotal %d kB (%v), want about 1Gi", kb, err)
			}
		}},
		{file: "vmi-kernel-boot.yaml", cache: "warm", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, _ *launcher.Client, _ map[string]qmpBlock) {
			guestReady(t, v)
		}},
		{file: "vmi-sata.yaml", cache: "warm", check: func(t *testing.T, v *vmletv1.VirtualMachineInstance, c *launcher.Client, b map[string]qmpBlock) {
			cirros(t, v, c, b)
		}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yaml")+"-"+tt.cache, func(t *testing.T) {
			vmi := kubevirtFixture(t, tt.file)
			ctx := context.Background()
			start := time.Now()
			if err := env.Client.Create(ctx, vmi); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(vmi)
			createdAt[vmi.UID] = start
			got := waitPhase(t, key, vmletv1.Running, 2*time.Minute)
			t.Logf("%s, %s image cache: create → Running %s (%s)", tt.file, tt.cache, time.Since(start).Round(time.Millisecond), got.Status.Launcher.Accelerator)

			var names []string
			for _, v := range got.Spec.Volumes {
				names = append(names, v.Name)
			}
			waitVolumes(t, key, vmletv1.VolumeReady, names...)
			c := launcherClient(t, a, got)
			b := queryBlock(t, c)
			if len(b) != len(got.Spec.Volumes) {
				t.Errorf("QEMU has %d disks, the fixture %d volumes: %v", len(b), len(got.Spec.Volumes), b)
			}
			tt.check(t, got, c, b)
			if err := env.Client.Delete(ctx, got); err != nil {
				t.Fatal(err)
			}
			waitDeleted(t, key)
			assertNothingLeft(t, string(vmi.UID), int(got.Status.Launcher.PID))
		})
	}
	if fi, err := os.Stat(hostDisk); err != nil || fi.Size() != 1<<30 {
		t.Errorf("the host disk after its VMI was deleted: %v, want a 1Gi file kept", err)
	}
	if n := cachedImages(t, cache); n != 2 {
		t.Errorf("image cache holds %d images, want both fixture images kept", n)
	}
}

// createdAt is when each fixture VMI was created, for guestReady's log.
var createdAt = map[types.UID]time.Time{}

// guestReady waits for the guest's ready marker on its console and its guest agent.
func guestReady(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	waitSerial(t, consoleLog(v), testguest.MarkerReady)
	t.Logf("%s: create → guest ready marker %s", v.Name, time.Since(createdAt[v.UID]).Round(time.Millisecond))
	waitCondition(t, client.ObjectKeyFromObject(v), vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// checkBlock checks QEMU has disk id open on file (format; virtual size unless size < 0).
func checkBlock(t *testing.T, b map[string]qmpBlock, id, file, format string, size int64) qmpBlock {
	t.Helper()
	d, ok := b[id]
	if !ok {
		t.Fatalf("QEMU has no disk %s: %v", id, b)
	}
	in := d.Inserted
	if in.File != file || in.Drv != format || (size >= 0 && in.Image.VirtualSize != size) {
		t.Errorf("disk %s: file %s, format %s, size %d; want %s, %s, %d", id, in.File, in.Drv, in.Image.VirtualSize, file, format, size)
	}
	return d
}

// ownVarData makes sure the test owns p (vmi-host-disk.yaml's hostDisk, in /var/data): it
// refuses to run over an existing file, and removes the file and, if it made it, the folder.
func ownVarData(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err == nil {
		t.Fatalf("%s exists; this test lets the agent create it (the fixture's DiskOrCreate) and deletes it: move it away", p)
	}
	dir := filepath.Dir(p)
	made := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		made = true
	}
	t.Cleanup(func() {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
		if made {
			if err := os.Remove(dir); err != nil {
				t.Error(err)
			}
		}
	})
}
