package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
)

// TestClaimImageBytes: KubeVirt's 5.5% filesystem overhead, 1 MiB aligned.
func TestClaimImageBytes(t *testing.T) {
	for capacity, want := range map[int64]int64{1 << 30: 967 << 20, 2 << 20: 1 << 20, 64 << 20: 60 << 20, 0: 0} {
		if got := ClaimImageBytes(capacity); got != want {
			t.Errorf("ClaimImageBytes(%d) = %d MiB, want %d MiB", capacity, got>>20, want>>20)
		}
	}
}

// TestTranslatePodClaims: the launcher pod's claims translate to raw QEMU drives on them — a
// Filesystem claim's disk.img (made sparse, KubeVirt's size, when missing; confined to the
// claim's folder), a Block claim's device, an ephemeral overlay over a read-only claim — and a
// pod claim wins over a node-wide claim of the same name.
func TestTranslatePodClaims(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "vm1", UID: "0b5e2c1a-1111-2222-3333-444455556666"},
		Spec: vmletv1.VirtualMachineInstanceSpec{Volumes: []vmletv1.Volume{
			{Name: "root", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "root-disk"}}}},
			{Name: "fast", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "fast-dv"}}},
			{Name: "scratch", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
				PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "golden"}}}},
		}},
	}
	pod := map[string]launcherpod.Claim{
		"root-disk": {ClaimName: "root-disk", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/pv/root", CapacityBytes: 1 << 30},
		"fast-dv":   {ClaimName: "fast-dv", Mode: corev1.PersistentVolumeBlock, Path: "/dev/loop9", CapacityBytes: 8 << 20},
		"golden":    {ClaimName: "golden", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/pv/golden", CapacityBytes: 64 << 20, ReadOnly: true},
	}
	env := translate.NodeEnv{RunDir: "/run/vl/uid-1", VolumeDir: "/var/lib/vl/uid-1", Storage: translate.StorageEnv{
		Claims: map[string]storage.Claim{"root-disk": {Path: "/srv/node-wide"}}}}
	d, err := translate.Translate(vmi, withClaims(env, vmi.Namespace, pod), translate.Referenced{})
	if err != nil {
		t.Fatal(err)
	}
	wantActions := []storage.Action{
		{Kind: storage.ActHostPath, Volume: "root", Path: "/mnt/pv/root/disk.img", Root: "/mnt/pv/root", Create: true, SizeBytes: 967 << 20},
		{Kind: storage.ActHostPath, Volume: "fast", Path: "/dev/loop9", Block: true},
		{Kind: storage.ActOverlay, Volume: "scratch", Path: "/var/lib/vl/uid-1/disks/scratch.qcow2", Backing: "/mnt/pv/golden/disk.img",
			BackingRoot: "/mnt/pv/golden", BackingFormat: qemu.FormatRaw},
	}
	if diff := cmp.Diff(wantActions, d.Storage.Actions); diff != "" {
		t.Errorf("storage actions (-want +got):\n%s", diff)
	}
	wantDisks := []qemu.Disk{
		{ID: "root", Path: "/mnt/pv/root/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusVirtio, BootIndex: 1},
		{ID: "fast", Path: "/dev/loop9", Format: qemu.FormatRaw, Bus: qemu.BusVirtio},
		{ID: "scratch", Path: "/var/lib/vl/uid-1/disks/scratch.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusVirtio},
	}
	if diff := cmp.Diff(wantDisks, d.Spec.Disks); diff != "" {
		t.Errorf("QEMU disks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]storage.BlockPath{{Path: "/dev/loop9"}}, d.Storage.BlockPaths()); diff != "" {
		t.Errorf("block devices for the filter (-want +got):\n%s", diff)
	}
	mode := corev1.PersistentVolumeBlock
	want := &vmletv1.PersistentVolumeClaimInfo{ClaimName: "fast-dv", VolumeMode: &mode,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")}}
	if diff := cmp.Diff(want, claimInfo(pod["fast-dv"])); diff != "" {
		t.Errorf("claim info (-want +got):\n%s", diff)
	}
}
