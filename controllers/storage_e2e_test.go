package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIVolumesInGuest: one VMI with every volume source the node provides — a containerDisk
// pulled over the registry protocol, an emptyDisk, a hostDisk (DiskOrCreate), a PVC, a
// dataVolume, an ephemeral overlay over a claim and a NoCloud disk whose user data comes from a
// Secret, attached as a SCSI cdrom — reaches Running, and the guest proves each disk: the
// containerDisk's and claims' contents, the sizes, and the user data read from the mounted ISO.
// After deletion the VMI's storage folder is gone (overlays, ISO, kernel links), guest writes
// persist in the host disk and the PVC but not in the ephemeral's claim, and the image cache
// keeps the images.
func TestVMIVolumesInGuest(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	reg := storagetest.StartRegistry(t)
	dataRef := reg.Push(t, "vmlet/data-disk:v1", storagetest.ContainerDisk(t, files.DataDisk))
	hostRoot, claimDir := nodeDir(t), nodeDir(t)
	claims := map[string]storage.Claim{
		"data-claim": {Path: writeClaim(t, filepath.Join(claimDir, "data"), "VMLET-CLAIM-DATA", 16<<20)},
		"dv-claim":   {Path: writeClaim(t, filepath.Join(claimDir, "dv"), "VMLET-DATAVOLUME", 8<<20)},
		"base-claim": {Path: writeClaim(t, filepath.Join(claimDir, "base"), "VMLET-EPHEMERAL-BASE", 8<<20)},
	}
	a := startAgent(t, agentOptions{
		ImageSources: map[string]string{"vmlet.dev/data-disk:v1": dataRef},
		HostDiskRoot: hostRoot,
		Claims:       claims,
	})
	defer a.stop(t)
	ctx := context.Background()

	userData := fmt.Sprintf("#cloud-config\n# VMLET-USER-DATA %d\n", time.Now().UnixNano())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "volumes-userdata"},
		Data: map[string][]byte{"userdata": []byte(userData)}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Client.Delete(ctx, secret) }()

	vmi := newVMI("volumes")
	hostDisk := filepath.Join(hostRoot, "disk.img")
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "containerdisk", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "vmlet.dev/data-disk:v1"}}},
		{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}},
		{Name: "host", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{
			Path: hostDisk, Type: vmletv1.HostDiskExistsOrCreate, Capacity: resource.MustParse("32Mi")}}},
		claimVolume("pvc", "data-claim", false),
		{Name: "dv", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "dv-claim"}}},
		{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
			PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base-claim"}}}},
		{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
			CloudInitData: vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: secret.Name}}}}},
	}
	for _, v := range vmi.Spec.Volumes[:6] {
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: v.Name, Serial: v.Name})
	}
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: "cloudinit",
		DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: vmletv1.DiskBusSCSI}}})
	start := time.Now()
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	t.Logf("create → Ready with 7 volumes: %s", time.Since(start).Round(time.Millisecond))
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	var names []string
	for _, v := range vmi.Spec.Volumes {
		names = append(names, v.Name)
	}
	waitVolumes(t, key, vmletv1.VolumeReady, names...)

	c := launcherClient(t, a, running)
	disks := guestDisksBySerial(t, c)
	t.Logf("guest disks by serial: %v", disks)
	want := map[string]int64{"containerdisk": 64 << 20, "scratch": 64 << 20, "host": 32 << 20, "pvc": 16 << 20, "dv": 8 << 20, "eph": 8 << 20}
	for serial, size := range want {
		if d, ok := disks[serial]; !ok || d.sectors != size/512 {
			t.Errorf("guest disk %s: %+v (present %v), want %d sectors", serial, d, ok, size/512)
		}
	}
	for serial, text := range map[string]string{"containerdisk": testguest.DataDiskLabel, "pvc": "VMLET-CLAIM-DATA",
		"dv": "VMLET-DATAVOLUME", "eph": "VMLET-EPHEMERAL-BASE"} {
		if got := guestRun(t, c, fmt.Sprintf("head -c %d /dev/%s", len(text), disks[serial].dev)); got != text {
			t.Errorf("guest reads %q from %s, want %q", got, serial, text)
		}
	}
	iso := guestRun(t, c, "mkdir -p /mnt/ci && mount -t iso9660 -o ro /dev/sr0 /mnt/ci && ls /mnt/ci && cat /mnt/ci/user-data")
	if wantISO := "meta-data\nuser-data\n" + strings.TrimSpace(userData); iso != wantISO {
		t.Errorf("cloud-init cdrom in the guest:\n%s\nwant:\n%s", iso, wantISO)
	}
	if meta := guestRun(t, c, "cat /mnt/ci/meta-data"); !strings.Contains(meta, `"instance-id":"volumes.default"`) {
		t.Errorf("meta-data: %s", meta)
	}
	guestRun(t, c, fmt.Sprintf("umount /mnt/ci; for d in %s:HOST %s:PVC %s:EPH; do printf VMLET-GUEST-WROTE-${d#*:} | dd of=/dev/${d%%:*} conv=notrunc 2>/dev/null; done; sync",
		disks["host"].dev, disks["pvc"].dev, disks["eph"].dev))

	vdir := filepath.Join(volumeRoot, uid)
	for _, f := range []string{"disks/containerdisk.qcow2", "disks/scratch.qcow2", "disks/eph.qcow2", "disks/cloudinit.iso", "boot/kernel", "boot/initrd"} {
		if _, err := os.Stat(filepath.Join(vdir, f)); err != nil {
			t.Errorf("storage folder lacks %s: %v", f, err)
		}
	}
	t0 := time.Now()
	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "VMI deleted", func() (bool, string) {
		_, err := getVMI(t, key)
		return err != nil, "still there"
	})
	t.Logf("delete → gone: %s", time.Since(t0).Round(time.Millisecond))
	assertNothingLeft(t, uid, int(running.Status.Launcher.PID))
	if !fileStarts(t, hostDisk, "VMLET-GUEST-WROTE-HOST") {
		t.Error("the guest's write to the hostDisk did not persist")
	}
	if !fileStarts(t, filepath.Join(claims["data-claim"].Path, "disk.img"), "VMLET-GUEST-WROTE-PVC") {
		t.Error("the guest's write to the PVC did not persist")
	}
	if !fileStarts(t, filepath.Join(claims["base-claim"].Path, "disk.img"), "VMLET-EPHEMERAL-BASE") {
		t.Error("the guest's write to the ephemeral volume reached its claim")
	}
	if n := cachedImages(t, imageCache); n < 2 {
		t.Errorf("image cache holds %d images after deletion, want the kernel and containerDisk images kept", n)
	}
}

// TestVMIHotplugVolume: adding a hotpluggable PVC and its disk to a running VMI's spec attaches
// it (the guest sees the disk appear), a hotpluggable volume this node cannot provide is
// reported in its volume status without disturbing the VMI, and removing them detaches the disk.
func TestVMIHotplugVolume(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	claim := writeClaim(t, nodeDir(t), "VMLET-HOT-DISK", 8<<20)
	a := startAgent(t, agentOptions{Claims: map[string]storage.Claim{"hot-claim": {Path: claim}}})
	defer a.stop(t)
	ctx := context.Background()
	vmi := newVMI("hotplug")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	serial := consoleLog(vmi)
	waitSerial(t, serial, testguest.MarkerReady)

	t0 := time.Now()
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume("hot", "hot-claim", true), claimVolume("missing", "no-such-claim", true))
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: "hot", Serial: "hot"})
	})
	got := waitVolumes(t, key, vmletv1.VolumeReady, "hot")
	t.Logf("spec patched → volume Ready: %s", time.Since(t0).Round(time.Millisecond))
	waitSerial(t, serial, testguest.MarkerDiskAdded+" ")
	c := launcherClient(t, a, got)
	d, ok := guestDisksBySerial(t, c)["hot"]
	if !ok || d.sectors != 8<<20/512 {
		t.Fatalf("hotplugged disk in the guest: %+v (present %v)", d, ok)
	}
	if text := guestRun(t, c, "head -c 14 /dev/"+d.dev); text != "VMLET-HOT-DISK" {
		t.Errorf("hotplugged disk reads %q", text)
	}
	got = waitVolumes(t, key, vmletv1.VolumePending, "missing")
	if s, _ := volumeStatus(got, "missing"); s.Reason != storage.ReasonVolumeNotFound || s.HotplugVolume == nil {
		t.Errorf("volume status of an unknown claim: %+v", s)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, vmletv1.VirtualMachineInstanceReady) || got.Status.Phase != vmletv1.Running {
		t.Errorf("a volume that cannot be attached disturbed the VMI: %s", summary(got))
	}
	waitEvent(t, got, storage.ReasonVolumeNotFound)

	t0 = time.Now()
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes, s.Domain.Devices.Disks = nil, nil
	})
	waitSerial(t, serial, testguest.MarkerDiskRemoved+" "+d.dev)
	eventually(t, time.Minute, "hot volumes gone from the status", func() (bool, string) {
		v, err := getVMI(t, key)
		return err == nil && len(v.Status.VolumeStatus) == 0, fmt.Sprintf("%+v", v.Status.VolumeStatus)
	})
	t.Logf("volumes removed from the spec → disk gone from the guest and the status: %s", time.Since(t0).Round(time.Millisecond))
	if _, ok := guestDisksBySerial(t, c)["hot"]; ok {
		t.Error("the guest still has the unplugged disk")
	}
	if dom, err := c.GetDomain(ctx); err != nil || len(dom.GetDisks()) != 0 {
		t.Errorf("the launcher still has disks %v (%v)", dom.GetDisks(), err)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "VMI deleted", func() (bool, string) {
		_, err := getVMI(t, key)
		return err != nil, "still there"
	})
	assertNothingLeft(t, string(vmi.UID))
	if !fileStarts(t, filepath.Join(claim, "disk.img"), "VMLET-HOT-DISK") {
		t.Error("the claim's image changed")
	}
}

// TestVMICloudInitSecret: a VMI whose cloud-init Secret does not exist yet waits for it
// (Synchronized=False SecretNotFound, a Warning event, no launcher), then starts once it is
// created. A later Secret change that no longer translates is reported without touching the
// running domain, and the VMI is Synchronized again once the Secret is fixed.
func TestVMICloudInitSecret(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	ctx := context.Background()
	vmi := newVMI("late-secret")
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0) // deleted before its guest booted
	vmi.Spec.Volumes = []vmletv1.Volume{{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
		CloudInitData: vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: "late-userdata"}}}}}}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	eventually(t, 30*time.Second, "waiting for the secret", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Reason == "SecretNotFound" && v.Status.Phase == vmletv1.Scheduled, summary(v)
	})
	waitEvent(t, vmi, "SecretNotFound")
	if _, err := os.Stat(filepath.Join(runRoot, string(vmi.UID))); !os.IsNotExist(err) {
		t.Errorf("a launcher started before its cloud-init secret existed: %v", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late-userdata"},
		Data: map[string][]byte{"userData": []byte("#cloud-config\n")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Client.Delete(ctx, secret) }()
	t0 := time.Now()
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, time.Minute)
	t.Logf("secret created → Ready: %s", time.Since(t0).Round(time.Millisecond))

	// A Secret that stops translating (no user data key) leaves the running domain alone.
	secret.Data = map[string][]byte{"other": nil}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "spec no longer translates", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Reason == "InvalidSpec", summary(v)
	})
	waitEvent(t, vmi, "InvalidSpec")
	if v, _ := getVMI(t, key); v.Status.Phase != vmletv1.Running || !alive(int(running.Status.Launcher.PID)) {
		t.Errorf("a Secret change disturbed the running VMI: %s", summary(v))
	}
	secret.Data = map[string][]byte{"userData": []byte("#cloud-config\n")}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, key, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, time.Minute)
	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, string(vmi.UID))
}

// patchVolumes changes the VMI's volumes and disks with a merge patch (the lists are replaced).
func patchVolumes(t *testing.T, key client.ObjectKey, change func(*vmletv1.VirtualMachineInstanceSpec)) {
	t.Helper()
	v, err := getVMI(t, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	change(&v.Spec)
	if err := env.Client.Patch(context.Background(), v, patch); err != nil {
		t.Fatalf("patch volumes: %v", err)
	}
}

// claimVolume is a persistentVolumeClaim volume.
func claimVolume(name, claim string, hotpluggable bool) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: claim}, Hotpluggable: hotpluggable}}}
}
