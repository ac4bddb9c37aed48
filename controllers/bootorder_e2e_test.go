package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
)

// bootImage is the bootable containerDisk of the boot order tests: the test guest's BIOS boot
// disk (test/assets/bootdisk), served from an OCI layout.
const bootImage = "registry:5000/kubevirt/cirros-container-disk-demo:bootorder"

// bootCase is one VMI of the boot order tests: a bootable containerDisk ("boot"), an emptyDisk
// ("scratch") and a NoCloud disk ("ci"), with the buses and boot orders given.
type bootCase struct {
	name  string
	disks []vmletv1.Disk // in the spec's order
	iface *uint          // the default interface's bootOrder; nil: no interface listed
}

func bootDiskOn(name string, bus vmletv1.DiskBus, order ...uint) vmletv1.Disk {
	d := vmletv1.Disk{Name: name, DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: bus}}}
	if len(order) > 0 {
		d.BootOrder = &order[0]
	}
	return d
}

func bootCDRomOn(name string, bus vmletv1.DiskBus) vmletv1.Disk {
	return vmletv1.Disk{Name: name, DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: bus}}}
}

func (c bootCase) vmi(name string) *vmletv1.VirtualMachineInstance {
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: vmletv1.VirtualMachineInstanceSpec{
			Domain: vmletv1.DomainSpec{
				Memory:  &vmletv1.Memory{Guest: ptr.To(resource.MustParse("128Mi"))},
				Devices: vmletv1.Devices{Disks: c.disks},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Volumes: []vmletv1.Volume{
				{Name: "boot", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: bootImage}}},
				{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}},
				{Name: "ci", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
					CloudInitData: vmletv1.CloudInitData{UserData: "#cloud-config\n"}}}},
			},
		},
	}
	if c.iface != nil {
		vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", BootOrder: c.iface,
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
		vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	}
	return vmi
}

// startBootAgent serves the boot disk as bootImage and starts an agent.
func startBootAgent(t *testing.T) *agent {
	t.Helper()
	prereq.Root(t)
	prereq.QEMU(t)
	layout := storagetest.WriteLayout(t, filepath.Join(t.TempDir(), "bootdisk"), storagetest.ContainerDisk(t, bootDisk(t)), "bootorder")
	return startAgent(t, agentOptions{ImageSources: map[string]string{bootImage: layout}})
}

// TestBootOrder boots every bus order in the real guest through SeaBIOS (no kernelBoot): the
// bootable containerDisk on virtio, sata and scsi, with an emptyDisk and a NoCloud disk (a sata
// cdrom, or virtio disks) either after it with no bootOrder anywhere (KubeVirt boots the first
// disk), or before it with bootOrder 1 on the boot disk. Each case passes when the boot disk's
// EXTLINUX banner appears on the console (only that disk has a boot loader) after exactly one
// "Booting from" line of SeaBIOS: the firmware went straight to the right disk (-boot
// strict=on: nothing else is tried). QMP qom-get shows
// bootindex 1 on the boot disk and none (-1) on the others. The first case is issue #13's VMI,
// which SeaBIOS failed to boot before (it tried the sata emptyDisk, then the cdrom, then PXE).
//
// Cases run three at a time (TCG boots on 2 cores); each stops at the boot loader's banner.
func TestBootOrder(t *testing.T) {
	a := startBootAgent(t)
	defer a.stop(t)
	const (
		virtio = vmletv1.DiskBusVirtio
		sata   = vmletv1.DiskBusSATA
		scsi   = vmletv1.DiskBusSCSI
	)
	var cases []bootCase
	for _, bus := range []vmletv1.DiskBus{virtio, sata, scsi} {
		cases = append(cases,
			bootCase{name: fmt.Sprintf("%s-first-sata-after", bus),
				disks: []vmletv1.Disk{bootDiskOn("boot", bus), bootDiskOn("scratch", sata), bootCDRomOn("ci", sata)}},
			bootCase{name: fmt.Sprintf("%s-first-virtio-after", bus),
				disks: []vmletv1.Disk{bootDiskOn("boot", bus), bootDiskOn("scratch", virtio), bootDiskOn("ci", virtio)}},
			bootCase{name: fmt.Sprintf("%s-last-bootorder-sata-before", bus),
				disks: []vmletv1.Disk{bootDiskOn("scratch", sata), bootCDRomOn("ci", sata), bootDiskOn("boot", bus, 1)}},
			bootCase{name: fmt.Sprintf("%s-last-bootorder-virtio-before", bus),
				disks: []vmletv1.Disk{bootDiskOn("scratch", virtio), bootDiskOn("ci", virtio), bootDiskOn("boot", bus, 1)}},
		)
	}
	start := time.Now()
	sem := make(chan struct{}, 3)
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(c.name, func(t *testing.T) {
				v := createBootVMI(t, c.vmi(fmt.Sprintf("boot-%d", i)))
				defer deleteBootVMI(t, v)
				waitBooted(t, v)
				lc := launcherClient(t, a, v)
				want := map[string]int{"boot": 1, "scratch": -1, "ci": -1}
				for id, idx := range want {
					if got := qomBootIndex(t, lc, id); got != idx {
						t.Errorf("QEMU device %s has bootindex %d, want %d", id, got, idx)
					}
				}
			})
		}()
	}
	wg.Wait()
	t.Logf("%d boot order cases booted in %s", len(cases), time.Since(start).Round(time.Second))
}

// TestBootOrderInterface: a VMI whose interface has bootOrder 1 and whose boot disk has
// bootOrder 2 gets QEMU bootindex 1 on its NIC and 2 on the disk (qom-get; no PXE server
// exists here), nothing on the other disks; SeaBIOS tries the NIC's option ROM first, then
// boots the disk. Before, a bootOrder on an interface was refused as unsupported.
func TestBootOrderInterface(t *testing.T) {
	a := startBootAgent(t)
	defer a.stop(t)
	c := bootCase{name: "nic-1-disk-2", iface: ptr.To[uint](1),
		disks: []vmletv1.Disk{bootDiskOn("scratch", vmletv1.DiskBusSATA), bootCDRomOn("ci", vmletv1.DiskBusSATA),
			bootDiskOn("boot", vmletv1.DiskBusVirtio, 2)}}
	v := createBootVMI(t, c.vmi("boot-nic"))
	defer deleteBootVMI(t, v)
	lc := launcherClient(t, a, v)
	nic := translate.NICID("default")
	for id, want := range map[string]int{nic: 1, "boot": 2, "scratch": -1, "ci": -1} {
		if got := qomBootIndex(t, lc, id); got != want {
			t.Errorf("QEMU device %s has bootindex %d, want %d", id, got, want)
		}
	}
	// The NIC's ROM found nothing to boot; the firmware went on to the disk.
	waitSerial(t, consoleLog(v), bootLoaderBanner)
	log := readLog(t, consoleLog(v))
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, "Booting from "); i >= 0 {
			t.Logf("SeaBIOS: %s", strings.TrimSpace(l[i:]))
		}
	}
	if disk := strings.Index(log, "Booting from Hard Disk"); disk < 0 || strings.Index(log, "Booting from ") == disk {
		t.Errorf("SeaBIOS did not try the NIC before the disk:\n%s", log)
	}
}

func createBootVMI(t *testing.T, v *vmletv1.VirtualMachineInstance) *vmletv1.VirtualMachineInstance {
	t.Helper()
	if err := env.Client.Create(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	return waitPhase(t, client.ObjectKeyFromObject(v), vmletv1.Running, 2*time.Minute)
}

func deleteBootVMI(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), v); err != nil {
		t.Error(err)
		return
	}
	waitDeleted(t, client.ObjectKeyFromObject(v))
	assertNothingLeft(t, string(v.UID), int(v.Status.Launcher.PID))
}

// bootLoaderBanner is what the boot disk's EXTLINUX prints first (test/assets/bootdisk).
const bootLoaderBanner = "SYSLINUX "

// waitBooted waits for the boot disk's boot loader banner after exactly one SeaBIOS boot
// attempt; a failed attempt ends the wait at once with the console log.
func waitBooted(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	start := time.Now()
	eventually(t, 2*time.Minute, v.Name+" boots the boot disk", func() (bool, string) {
		log := readLog(t, consoleLog(v))
		if strings.Contains(log, "Boot failed") || strings.Contains(log, "No bootable device") {
			t.Fatalf("SeaBIOS did not boot the boot disk first:\n%s", log)
		}
		return strings.Contains(log, bootLoaderBanner), tail([]byte(log))
	})
	if log := readLog(t, consoleLog(v)); strings.Count(log, "Booting from ") != 1 {
		t.Errorf("SeaBIOS made more than one boot attempt:\n%s", log)
	}
	t.Logf("%s: Running → boot loader %s", v.Name, time.Since(start).Round(time.Millisecond))
}

func readLog(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// qomBootIndex reads a device's bootindex property (-1: none). QMP: qom-get.
func qomBootIndex(t *testing.T, c *launcher.Client, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reply, err := c.QMP(ctx, fmt.Sprintf(`{"execute":"qom-get","arguments":{"path":"/machine/peripheral/%s","property":"bootindex"}}`, id))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Return *int            `json:"return"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil || r.Return == nil {
		t.Fatalf("qom-get %s bootindex: %v: %s", id, err, reply)
	}
	return *r.Return
}

// TestBootOrderStrict: disks without a bootOrder are not tried when a device has one (libvirt's
// -boot strict=on, the API's promise). The only indexed disk is the blank emptyDisk: SeaBIOS
// tries it, reports no bootable device and never reaches the bootable disk listed after it.
func TestBootOrderStrict(t *testing.T) {
	a := startBootAgent(t)
	defer a.stop(t)
	c := bootCase{name: "strict", disks: []vmletv1.Disk{bootDiskOn("scratch", vmletv1.DiskBusVirtio, 1),
		bootDiskOn("boot", vmletv1.DiskBusVirtio), bootCDRomOn("ci", vmletv1.DiskBusSATA)}}
	v := createBootVMI(t, c.vmi("boot-strict"))
	defer deleteBootVMI(t, v)
	waitSerial(t, consoleLog(v), "No bootable device")
	log := readLog(t, consoleLog(v))
	if strings.Contains(log, bootLoaderBanner) || strings.Count(log, "Booting from ") != 1 {
		t.Errorf("SeaBIOS tried more than the indexed disk:\n%s", log)
	}
	if got := qomBootIndex(t, launcherClient(t, a, v), "boot"); got != -1 {
		t.Errorf("the disk without bootOrder has bootindex %d, want none", got)
	}
}
