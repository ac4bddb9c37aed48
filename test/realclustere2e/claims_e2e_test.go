package realclustere2e_test

import (
	"bytes"
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
	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/poll"
)

// claimPV makes a local PersistentVolume at path on the node and a claim that the real
// kube-controller-manager binds to it.
func claimPV(t testing.TB, name, path string, mode corev1.PersistentVolumeMode, size string) {
	t.Helper()
	claimPVOn(t, name, path, mode, size, corev1.ReadWriteOnce, cl.NodeName)
}

// claimPVOn makes a local PersistentVolume at path reachable from the given nodes and a claim
// bound to it with the access mode.
func claimPVOn(t testing.TB, name, path string, mode corev1.PersistentVolumeMode, size string, am corev1.PersistentVolumeAccessMode, nodes ...string) {
	t.Helper()
	ctx := context.Background()
	access := []corev1.PersistentVolumeAccessMode{am}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}, AccessModes: access, VolumeMode: &mode,
		StorageClassName: "vmlet-local", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}},
	}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: objMeta(name), Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: access, VolumeMode: &mode, StorageClassName: ptr.To("vmlet-local"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}}
	for _, o := range []client.Object{pv, pvc} {
		if err := kc.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), pvc)
		_ = kc.Delete(context.Background(), pv)
	})
	poll.Until(t, 2*time.Minute, name+" bound", func() (bool, string) {
		got := &corev1.PersistentVolumeClaim{}
		if err := kc.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.ClaimBound, string(got.Status.Phase)
	})
}

func claimSpec(name string) string {
	return `spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      disks:
      - {name: root, disk: {}}
      - {name: fs, serial: fs, disk: {}}
      - {name: blk, serial: blk, disk: {}}
  volumes:
  - name: root
    containerDisk: {image: ` + diskImage + `}
  - name: fs
    persistentVolumeClaim: {claimName: ` + name + `-fs}
  - name: blk
    dataVolume: {name: ` + name + `-blk}
`
}

// TestVMIOnClaims: on the real cluster, a VMI boots from a containerDisk with a Filesystem
// claim (a local PV folder: the agent makes disk.img in it) and a Block claim (a loop device
// as a local PV, a dataVolume's claim), both bound by the real controller-manager and mounted
// by the real kubelet; the guest writes to both; after `kubectl delete vmi` and a new VMI on
// the same claims the guest reads its writes back.
func TestVMIOnClaims(t *testing.T) {
	need(t)
	name := "claims-" + suffix()
	pvDir := filepath.Join(nodeState, "pv-"+name) // below the agent's hostPath, which it sees
	if err := os.MkdirAll(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pvDir) })
	dev := loopdev.Attach(t, filepath.Join(t.TempDir(), "block.img"), "VMLET-REAL-BLOCK", 8<<20)
	claimPV(t, name+"-fs", pvDir, corev1.PersistentVolumeFilesystem, "64Mi")
	claimPV(t, name+"-blk", dev, corev1.PersistentVolumeBlock, "8Mi")

	boot := func(vm string) *vmletv1.VirtualMachineInstance {
		t0 := time.Now()
		createVMI(t, vm, claimSpec(name))
		vmi := waitBooted(t, vm)
		t.Logf("%s: created → booted with a filesystem and a block claim in %s", vm, time.Since(t0).Round(time.Millisecond))
		return vmi
	}
	devOf := func(vmi *vmletv1.VirtualMachineInstance, serial string) string {
		return guestShell(t, vmi, `for d in /sys/block/vd*; do [ "$(cat $d/serial)" = `+serial+` ] && echo ${d##*/}; done; true`)
	}
	vmi := boot(name)
	if m := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable); m == nil || m.Reason != "DisksNotLiveMigratable" {
		t.Errorf("LiveMigratable %+v", m)
	}
	if got := guestShell(t, vmi, "head -c 16 /dev/"+devOf(vmi, "blk")); got != "VMLET-REAL-BLOCK" {
		t.Errorf("guest reads %q from the block claim", got)
	}
	guestShell(t, vmi, fmt.Sprintf("printf VMLET-WROTE-FS | dd of=/dev/%s conv=notrunc 2>/dev/null && printf VMLET-WROTE-BLK | dd of=/dev/%s conv=notrunc 2>/dev/null && sync",
		devOf(vmi, "fs"), devOf(vmi, "blk")))
	deleteVMI(t, name)

	again := boot(name + "-again")
	for serial, want := range map[string]string{"fs": "VMLET-WROTE-FS", "blk": "VMLET-WROTE-BLK"} {
		if got := guestShell(t, again, fmt.Sprintf("head -c %d /dev/%s", len(want), devOf(again, serial))); got != want {
			t.Errorf("the new VMI reads %q from %s, want %q", got, serial, want)
		}
	}
	deleteVMI(t, name+"-again")
}

// TestMigrationSharedClaim: a VMI with a ReadWriteMany Block claim (a loop device both nodes of
// this machine reach, as a local PV whose node affinity names both) is LiveMigratable; the guest
// writes to the claim, migrates to the other kubelet, and reads its write back there (the target
// opened the same device, not a copy), then writes again and the bytes are on the device. An
// ephemeral disk over a ReadOnlyMany claim (another loop device) migrates with it: the guest's
// write to it is there after the migration (its overlay was copied), the claim never written.
func TestMigrationSharedClaim(t *testing.T) {
	need(t)
	t.Parallel()
	name := "shared-" + suffix()
	dev := loopdev.Attach(t, filepath.Join(t.TempDir(), "block.img"), "VMLET-SHARED-BLK", 8<<20)
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Name)
	}
	claimPVOn(t, name, dev, corev1.PersistentVolumeBlock, "8Mi", corev1.ReadWriteMany, nodes...)
	base := loopdev.Attach(t, filepath.Join(t.TempDir(), "base.img"), "VMLET-EPH-BASE", 8<<20)
	claimPVOn(t, name+"-base", base, corev1.PersistentVolumeBlock, "8Mi", corev1.ReadOnlyMany, nodes...)
	spec := strings.Replace(migratableSpec, "    devices:\n", "    devices:\n      disks:\n      - {name: root, disk: {}}\n      - {name: blk, serial: blk, disk: {}}\n      - {name: eph, serial: eph, disk: {}}\n", 1)
	spec = strings.Replace(spec, "  volumes:\n", "  volumes:\n  - name: blk\n    persistentVolumeClaim: {claimName: "+name+"}\n  - name: eph\n    ephemeral:\n      persistentVolumeClaim: {claimName: "+name+"-base}\n", 1)
	b := boot(t, name, spec)
	v := waitVMI(t, b.name, time.Minute, "LiveMigratable", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, string(vmletv1.VirtualMachineInstanceIsMigratable))
	})
	devOf := func(v *vmletv1.VirtualMachineInstance, serial ...string) string {
		s := "blk"
		if len(serial) > 0 {
			s = serial[0]
		}
		return guestShell(t, v, `for d in /sys/block/vd*; do [ "$(cat $d/serial)" = `+s+` ] && echo ${d##*/}; done; true`)
	}
	guestShell(t, v, "printf VMLET-BEFORE-MIGR | dd of=/dev/"+devOf(v)+" conv=notrunc 2>/dev/null && sync")
	guestShell(t, v, "printf VMLET-EPH-WRITE | dd of=/dev/"+devOf(v, "eph")+" bs=512 seek=10 conv=notrunc 2>/dev/null && sync")
	from := v.Status.NodeName
	m := createMigration(t, b.name+"-m", b.name)
	poll.Until(t, 4*time.Minute, m.Name+" Succeeded", func() (bool, string) {
		if err := kc.Get(context.Background(), client.ObjectKeyFromObject(m), m); err != nil {
			return false, err.Error()
		}
		if m.Status.Phase == vmletv1.MigrationFailed {
			t.Fatalf("%s failed: %+v", m.Name, m.Status.MigrationState)
		}
		return m.Status.Phase == vmletv1.MigrationSucceeded, string(m.Status.Phase)
	})
	there := waitVMI(t, b.name, time.Minute, "on the other node", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName != from && conditionTrue(v, string(vmletv1.VirtualMachineInstanceReady))
	})
	if got := guestShell(t, there, "head -c 17 /dev/"+devOf(there)); got != "VMLET-BEFORE-MIGR" {
		t.Errorf("after the migration the guest reads %q from the shared claim", got)
	}
	// The ephemeral disk: its overlay was copied (the guest's write is there, read past its page
	// cache), the claim below it only read on either node.
	guestShell(t, there, "echo 3 > /proc/sys/vm/drop_caches")
	if got := guestShell(t, there, "dd if=/dev/"+devOf(there, "eph")+" bs=512 skip=10 count=1 2>/dev/null | head -c 15"); got != "VMLET-EPH-WRITE" {
		t.Errorf("after the migration the ephemeral disk reads %q at its write", got)
	}
	if got := guestShell(t, there, "head -c 14 /dev/"+devOf(there, "eph")); got != "VMLET-EPH-BASE" {
		t.Errorf("after the migration the ephemeral disk reads %q from its claim", got)
	}
	if b, err := os.ReadFile(base); err != nil || !bytes.HasPrefix(b, []byte("VMLET-EPH-BASE")) || bytes.Contains(b, []byte("VMLET-EPH-WRITE")) {
		t.Errorf("the ephemeral disk's claim changed (%v)", err)
	}
	guestShell(t, there, "printf VMLET-AFTER--MIGR | dd of=/dev/"+devOf(there)+" conv=notrunc oflag=direct 2>/dev/null && sync")
	poll.Until(t, 30*time.Second, "the target's write on the device", func() (bool, string) {
		f, err := os.Open(dev)
		if err != nil {
			return false, err.Error()
		}
		defer f.Close()
		buf := make([]byte, 17)
		_, _ = f.ReadAt(buf, 0)
		return string(buf) == "VMLET-AFTER--MIGR", string(buf)
	})
	deleteVMI(t, b.name)
}
