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

// TestStatusClaims: volumes on the launcher pod's claims are described by them; the others by
// the node's claims marked shared (namespace/name before name), as ReadWriteMany; a node claim
// that is not shared is described nowhere. The pod's map is not changed.
func TestStatusClaims(t *testing.T) {
	claim := func(vol, name string, hot bool) vmletv1.Volume {
		return vmletv1.Volume{Name: vol, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: name}, Hotpluggable: hot}}}
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Namespace = "ns"
	vmi.Spec.Volumes = []vmletv1.Volume{claim("a", "from-pod", false), claim("b", "shared", true), claim("c", "own", false),
		claim("d", "block", false), {Name: "e", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{}}}}
	pod := map[string]launcherpod.Claim{"from-pod": {ClaimName: "from-pod", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}
	node := map[string]storage.Claim{
		"shared":    {Path: "/any-namespace", Shared: true},
		"ns/shared": {Path: "/srv/shared", CapacityBytes: 1 << 20, Shared: true},
		"own":       {Path: "/srv/own"},
		"block":     {Path: "/dev/loop9", Mode: storage.Block, Shared: true},
		"from-pod":  {Path: "/srv/node-wide", Shared: true},
	}
	rwx := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	want := map[string]launcherpod.Claim{
		"from-pod": pod["from-pod"],
		"shared":   {ClaimName: "shared", Mode: corev1.PersistentVolumeFilesystem, Path: "/srv/shared", CapacityBytes: 1 << 20, AccessModes: rwx},
		"block":    {ClaimName: "block", Mode: corev1.PersistentVolumeBlock, Path: "/dev/loop9", AccessModes: rwx},
	}
	if diff := cmp.Diff(want, statusClaims(vmi, pod, node)); diff != "" {
		t.Errorf("statusClaims (-want +got):\n%s", diff)
	}
	if len(pod) != 1 {
		t.Errorf("the pod's claims were changed: %v", pod)
	}
	if got := statusClaims(vmi, nil, map[string]storage.Claim{"own": {Path: "/srv/own"}}); got != nil {
		t.Errorf("no shared claim: %v, want nil", got)
	}
	info := claimInfo(want["block"])
	if info.Capacity != nil || *info.VolumeMode != corev1.PersistentVolumeBlock {
		t.Errorf("claimInfo of a claim of unknown size: %+v, want no capacity", info)
	}
}

// TestMarkHotplugged: the layout's disks of hotpluggable volumes and interfaces of secondary
// networks are marked hot-plugged, the others not (a mark left from elsewhere is cleared).
func TestMarkHotplugged(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "i"}}},
		{Name: "hot", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "c"}, Hotpluggable: true}}},
	}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}},
		{Name: "sec", NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: "vmlet-node"}}}}
	l := &vmletv1.MigrationDomainLayout{Devices: []vmletv1.MigrationDevicePort{
		{Kind: "disk", ID: storage.DiskID("root"), Port: 1, Hotplugged: true},
		{Kind: "disk", ID: storage.DiskID("hot"), Port: 4},
		{Kind: "nic", ID: translate.NICID("default"), Port: 2},
		{Kind: "nic", ID: translate.NICID("sec"), Port: 3},
	}}
	markHotplugged(l, vmi)
	var got []bool
	for _, d := range l.Devices {
		got = append(got, d.Hotplugged)
	}
	if diff := cmp.Diff([]bool{false, true, false, true}, got); diff != "" {
		t.Errorf("hot-plugged marks (-want +got):\n%s", diff)
	}
}
