package main_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/internal/faultpoint"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// Rows of TestFaultMatrix that SIGKILL the node agent in the middle of storage work, a hotplug
// or a teardown. Where the moment shows from outside it is the sign (the registry serving half
// a layer, the launcher's QMP log); where it does not, the agent is started with a fault point
// armed (internal/faultpoint: it stops at that moment and says so) and killed there.

// pullHold is an image-pull row's registry, with the test guest's image whose largest layer
// the registry serves only halfway until released.
type pullHold struct {
	reg     *storagetest.Registry
	reached <-chan struct{}
	release func()
}

// holdGuestPull serves the test guest from a registry of the row's own and points the VMI at
// it, its largest layer held halfway.
func holdGuestPull(t *testing.T, vmi *vmletv1.VirtualMachineInstance) *pullHold {
	t.Helper()
	files := testguest.Assets(t)
	img, err := images.KernelBoot(files.Kernel, guestvmi.KernelPath, files.Initrd, guestvmi.InitrdPath)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var largest v1.Hash
	var most int64 = -1
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		if n > most {
			d, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			largest, most = d, n
		}
	}
	h := &pullHold{reg: storagetest.StartRegistry(t)}
	vmi.Spec.Domain.Firmware.KernelBoot.Container.Image = h.reg.Push(t, "vmlet/testguest:pull", img)
	h.reached, h.release = h.reg.Hold(largest.String())
	t.Cleanup(h.release)
	return h
}

// killMidPull waits until the agent has received half of the held layer and kills it there.
func (h *pullHold) killMidPull(t *testing.T, f *faultVM) {
	t.Helper()
	select {
	case <-h.reached:
	case <-time.After(3 * time.Minute):
		t.Fatal("the agent never got halfway through the guest image's largest layer")
	}
	f.killAgent(t)
	if n := launchersFor(t, f.runDir); n != 0 {
		t.Errorf("%d launchers before the image was pulled", n)
	}
}

// cacheTmp lists what unpackers left in the node's image cache (they unpack there, then rename
// the tree into place).
func (f *faultVM) cacheTmp(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(f.s.stateDir, "images", "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// imagePullRow: the agent SIGKILLed halfway through downloading the guest image's largest
// layer (the registry's sign). The restarted agent pulls it again and the VM runs; nothing of
// the killed download is left in the cache.
func imagePullRow() faultRow {
	var h *pullHold
	return faultRow{
		name:  "agent-kill/image-pull",
		setup: func(t *testing.T, _ *faultVM, vmi *vmletv1.VirtualMachineInstance) { h = holdGuestPull(t, vmi) },
		inject: func(t *testing.T, f *faultVM) {
			h.killMidPull(t, f)
			h.release()
			f.a = f.s.start(t)
			f.qemuPid = f.waitRunning(t)
			if left := f.cacheTmp(t); len(left) != 0 {
				t.Errorf("the killed download left %v in the image cache", left)
			}
			if n := h.reg.Gets("blobs"); n < 2 {
				t.Errorf("%d layer downloads; want the killed one and another", n)
			}
		},
	}
}

// imagePullDeletedRow: as imagePullRow, but the VMI is deleted while no agent runs, so the
// image is never pulled again: the restarted agent still removes the half-unpacked layer (it
// sweeps the cache's unpack folder at start) and finishes the deletion.
func imagePullDeletedRow() faultRow {
	var h *pullHold
	return faultRow{
		name:    "agent-kill/image-pull-then-delete",
		deletes: true,
		setup:   func(t *testing.T, _ *faultVM, vmi *vmletv1.VirtualMachineInstance) { h = holdGuestPull(t, vmi) },
		inject: func(t *testing.T, f *faultVM) {
			h.killMidPull(t, f)
			if left := f.cacheTmp(t); len(left) == 0 {
				t.Error("no half-unpacked layer in the image cache after the kill: the row kills too late")
			}
			v := &vmletv1.VirtualMachineInstance{}
			if err := f.s.env.Client.Get(context.Background(), f.key, v); err != nil {
				t.Fatal(err)
			}
			if err := f.s.env.Client.Delete(context.Background(), v); err != nil {
				t.Fatal(err)
			}
			f.a = f.s.start(t)
			f.waitDeleted(t)
			if left := f.cacheTmp(t); len(left) != 0 {
				t.Errorf("the killed download left %v in the image cache", left)
			}
		},
	}
}

// armPoint starts the row's first agent with fault point spec armed and returns the path of
// the sign the point writes when the agent stops there.
func armPoint(t *testing.T, f *faultVM, spec string) string {
	t.Helper()
	dir := t.TempDir()
	f.agentEnv = []string{faultpoint.EnvPoints + "=" + spec, faultpoint.EnvDir + "=" + dir}
	name, _, _ := strings.Cut(spec, ":")
	return filepath.Join(dir, faultpoint.SignName(name))
}

// waitSign waits until the agent stopped at its armed fault point.
func waitSign(t *testing.T, sign string) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "the agent at fault point "+filepath.Base(sign), func() (bool, string) {
		_, err := os.Stat(sign)
		return err == nil, fmt.Sprint(err)
	})
}

// storagePrepRow: the agent SIGKILLed in the middle of preparing the VMI's storage, after its
// empty disk was made and before the rest (the cloud-init disk, the hand-over to the launcher
// user). The restarted agent finishes the preparation, keeps what was made, and the VM runs
// with every disk; no temporary file is left in the VM's folder.
func storagePrepRow() faultRow {
	var sign string
	return faultRow{
		name: "agent-kill/storage-preparation",
		setup: func(t *testing.T, f *faultVM, vmi *vmletv1.VirtualMachineInstance) {
			sign = armPoint(t, f, "storage.action-done:create-empty")
			vmi.Spec.Volumes = append(vmi.Spec.Volumes,
				vmletv1.Volume{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}},
				vmletv1.Volume{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
					CloudInitData: vmletv1.CloudInitData{UserData: "#cloud-config\n"}}}})
		},
		inject: func(t *testing.T, f *faultVM) {
			waitSign(t, sign)
			f.killAgent(t)
			if n := launchersFor(t, f.runDir); n != 0 {
				t.Errorf("%d launchers before the storage was ready", n)
			}
			f.a = f.s.start(t)
			v := waitFor(t, f.s.env.Client, f.key, 4*time.Minute, "Ready with every volume", func(v *vmletv1.VirtualMachineInstance) bool {
				return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) && v.Status.Launcher != nil &&
					volumePhase(v, "scratch") == vmletv1.VolumeReady && volumePhase(v, "cloudinit") == vmletv1.VolumeReady
			})
			f.qemuPid = int(v.Status.Launcher.PID)
			waitFile(t, filepath.Join(f.runDir, "logs", "serial.log"), testguest.MarkerReady, 3*time.Minute)
			volDir := filepath.Join(f.s.stateDir, "volumes", f.uid)
			_ = filepath.WalkDir(volDir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && (strings.HasSuffix(p, ".tmp") || strings.Contains(d.Name(), ".tmp-")) {
					t.Errorf("temporary file left in the VM's folder: %s", p)
				}
				return nil
			})
		},
	}
}

// volumePhase is the phase of the VMI's volume name in its status ("" if absent).
func volumePhase(v *vmletv1.VirtualMachineInstance, name string) vmletv1.VolumePhase {
	for _, s := range v.Status.VolumeStatus {
		if s.Name == name {
			return s.Phase
		}
	}
	return ""
}

// patchSpec changes the VMI's spec with a merge patch.
func patchSpec(t *testing.T, c client.Client, key client.ObjectKey, change func(*vmletv1.VirtualMachineInstanceSpec)) {
	t.Helper()
	v := &vmletv1.VirtualMachineInstance{}
	if err := c.Get(context.Background(), key, v); err != nil {
		t.Fatal(err)
	}
	p := client.MergeFrom(v.DeepCopy())
	change(&v.Spec)
	if err := c.Patch(context.Background(), v, p); err != nil {
		t.Fatal(err)
	}
}

// diskHotplugRow: a hotpluggable claim added to the running VMI; the agent is SIGKILLed once
// the launcher sent QEMU the disk's blockdev-add. The restarted agent reports the volume Ready
// (the guest sees the disk, once), the same QEMU runs and the VMI is synchronized.
func diskHotplugRow() faultRow {
	return faultRow{
		name:        "agent-kill/disk-hotplug",
		waitRunning: true,
		setup: func(t *testing.T, f *faultVM, _ *vmletv1.VirtualMachineInstance) {
			// Beside the agent's folders (searchable by the launchers' user, as a claim must be).
			claim := filepath.Join(filepath.Dir(f.s.stateDir), "claims", "hot")
			if err := os.MkdirAll(claim, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(claim, "disk.img"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(claim, "disk.img"), 16<<20); err != nil {
				t.Fatal(err)
			}
			f.s.extraArgs = append(f.s.extraArgs, "--claim", "hot-claim="+claim)
		},
		inject: func(t *testing.T, f *faultVM) {
			serial := filepath.Join(f.runDir, "logs", "serial.log")
			n := f.qmpCount(`"execute":"blockdev-add"`)
			patchSpec(t, f.s.env.Client, f.key, func(s *vmletv1.VirtualMachineInstanceSpec) {
				s.Volumes = append(s.Volumes, vmletv1.Volume{Name: "hot", VolumeSource: vmletv1.VolumeSource{
					PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "hot-claim"}, Hotpluggable: true}}})
				s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: "hot", Serial: "hot"})
			})
			f.waitQMP(t, `"execute":"blockdev-add"`, n)
			f.killAgent(t)
			f.a = f.s.start(t)
			v := waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "hot volume Ready, synchronized", func(v *vmletv1.VirtualMachineInstance) bool {
				return volumePhase(v, "hot") == vmletv1.VolumeReady &&
					meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
			})
			f.keptVM(t, v)
			waitFile(t, serial, testguest.MarkerDiskAdded+" ", time.Minute)
			b, _ := os.ReadFile(serial)
			if n := strings.Count(string(b), testguest.MarkerDiskAdded+" "); n != 1 {
				t.Errorf("the guest saw %d disks added, want 1", n)
			}
		},
	}
}

// nicHotplugRow: a bridge NIC on the node's secondary network added to the running VMI; the
// agent is SIGKILLed once the launcher sent QEMU the NIC's netdev_add. The restarted agent
// reports the interface with the address the guest got for it by DHCP, the same QEMU runs and
// the VMI is synchronized.
func nicHotplugRow() faultRow {
	return faultRow{
		name:        "agent-kill/nic-hotplug",
		waitRunning: true,
		setup: func(_ *testing.T, _ *faultVM, vmi *vmletv1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
				InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
			vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
		},
		inject: func(t *testing.T, f *faultVM) {
			n := f.qmpCount(`"execute":"netdev_add"`)
			patchSpec(t, f.s.env.Client, f.key, func(s *vmletv1.VirtualMachineInstanceSpec) {
				s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, vmletv1.Interface{Name: "blue",
					InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}})
				s.Networks = append(s.Networks, vmletv1.Network{Name: "blue",
					NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: "vmlet-node"}}})
			})
			f.waitQMP(t, `"execute":"netdev_add"`, n)
			f.killAgent(t)
			f.a = f.s.start(t)
			v := waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "NIC blue with its address, synchronized", func(v *vmletv1.VirtualMachineInstance) bool {
				for _, i := range v.Status.Interfaces {
					if i.Name == "blue" && i.IP != "" {
						return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
					}
				}
				return false
			})
			f.keptVM(t, v)
			if got := f.qmpCount(`"execute":"netdev_add"`) - n; got != 1 {
				t.Errorf("%d netdev_add after the patch, want 1 (the NIC plugged once)", got)
			}
		},
	}
}

// teardownRow: the VMI deleted; the agent stops once the launcher is gone (the guest shut down)
// and before the VMI's network and storage are removed, and is SIGKILLed there. The restarted
// agent finishes the teardown and the deletion; the audit finds nothing left.
func teardownRow() faultRow {
	var sign string
	return faultRow{
		name:        "agent-kill/teardown",
		waitRunning: true,
		deletes:     true,
		setup: func(t *testing.T, f *faultVM, _ *vmletv1.VirtualMachineInstance) {
			sign = armPoint(t, f, "teardown.launcher-removed")
		},
		inject: func(t *testing.T, f *faultVM) {
			v := &vmletv1.VirtualMachineInstance{}
			if err := f.s.env.Client.Get(context.Background(), f.key, v); err != nil {
				t.Fatal(err)
			}
			if err := f.s.env.Client.Delete(context.Background(), v); err != nil {
				t.Fatal(err)
			}
			waitSign(t, sign)
			if poll.Alive(f.qemuPid) || launchersFor(t, f.runDir) != 0 {
				t.Errorf("at the teardown point: QEMU alive %v, %d launchers; want both gone", poll.Alive(f.qemuPid), launchersFor(t, f.runDir))
			}
			if err := f.s.env.Client.Get(context.Background(), f.key, v); err != nil {
				t.Fatalf("the VMI went before its teardown finished: %v", err)
			}
			f.killAgent(t)
			f.a = f.s.start(t)
		},
	}
}
