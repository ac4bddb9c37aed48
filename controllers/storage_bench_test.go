package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// BenchmarkStorageReApply measures what each reconcile of a started VMI pays for its storage:
// translating the VMI and applying its plan again over the files the first Apply made (the
// pinned image digests found in the cache, qemu-img info of each overlay and empty disk, the
// cloud-init ISO rewritten, the kernel relinked, host paths resolved). The VMI has a kernelBoot,
// a containerDisk, an emptyDisk, a hostDisk, a PVC, an ephemeral overlay and a NoCloud disk.
func BenchmarkStorageReApply(b *testing.B) {
	prereq.Root(b)
	prereq.QEMU(b)
	files := testguest.Assets(b)
	reg := storagetest.StartRegistry(b)
	dir := b.TempDir()
	cache, err := oci.Open(oci.Options{Dir: filepath.Join(dir, "cache")})
	if err != nil {
		b.Fatal(err)
	}
	host := &storage.Host{Images: cache}
	env := translate.NodeEnv{RunDir: filepath.Join(dir, "run"), VolumeDir: filepath.Join(dir, "vm"), Storage: translate.StorageEnv{
		HostDiskRoot: filepath.Join(dir, "hostdisks"),
		Claims: map[string]storage.Claim{
			"data": {Path: writeClaim(b, filepath.Join(dir, "data"), "DATA", 16<<20)},
			"base": {Path: writeClaim(b, filepath.Join(dir, "base"), "BASE", 16<<20)},
		},
		ImageSources: map[string]string{
			guestImage:               reg.Push(b, "vmlet/kernel:v1", storagetest.KernelBoot(b, files.Kernel, files.Initrd)),
			"vmlet.dev/data-disk:v1": reg.Push(b, "vmlet/data-disk:v1", storagetest.ContainerDisk(b, files.DataDisk)),
		},
	}}
	if err := os.MkdirAll(env.Storage.HostDiskRoot, 0o755); err != nil {
		b.Fatal(err)
	}
	vmi := newVMI("bench")
	vmi.UID = "6f1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a11"
	vmi.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = storagetest.KernelPath
	vmi.Spec.Domain.Firmware.KernelBoot.Container.InitrdPath = storagetest.InitrdPath
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "vmlet.dev/data-disk:v1"}}},
		{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
		{Name: "host", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{
			Path: filepath.Join(env.Storage.HostDiskRoot, "disk.img"), Type: vmletv1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}},
		claimVolume("data", "data", false),
		{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
			PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base"}}}},
		{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
			CloudInitData: vmletv1.CloudInitData{UserData: "#cloud-config\n"}}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	apply := func() {
		dom, err := translate.Translate(vmi, env, translate.Referenced{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := host.Apply(ctx, dom.Storage); err != nil {
			b.Fatal(err)
		}
	}
	apply() // the first Apply: pulls, overlays, ISO
	for b.Loop() {
		apply()
	}
}
