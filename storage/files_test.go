package storage

import (
	"reflect"
	"testing"

	"github.com/vmlet/vmlet/storage/cloudinit"
)

// TestFilesOf: the VM's own files are private, the containerDisk base and the kernel links
// (hard links into the cache) shared, hostDisks and claims (resolved) host files.
func TestFilesOf(t *testing.T) {
	volumes := []Volume{
		{Name: "root", ContainerDisk: &ContainerDisk{Image: image}},
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 30}},
		{Name: "host", HostDisk: &HostDisk{Path: hdRoot + "/vm1/disk.img", Type: HostDiskOrCreate, CapacityBytes: 1 << 20}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "empty"}},
		{Name: "cloudinit", CloudInitNoCloud: &cloudinit.Source{UserData: "#cloud-config\n"}},
	}
	opts := planOpts()
	opts.KernelBoot = &KernelBoot{Image: kimage, KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}
	p, err := Plan(volumes, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Bases: map[string]string{"root": "/cache/blobs/root.img"}}
	for _, d := range p.Disks {
		if p.DiskVolumes[d.ID] == "host" {
			d.Path = "/mnt/real/disk.img"
		}
		res.Disks = append(res.Disks, d)
	}
	d := vmDir + "/disks/"
	want := FileSet{
		Private: []string{vmDir, vmDir + "/disks", vmDir + "/boot", d + "root.qcow2", d + "scratch.qcow2", d + "eph.qcow2", d + "cloudinit.iso"},
		Shared:  []string{"/cache/blobs/root.img", vmDir + "/boot/kernel", vmDir + "/boot/initrd"},
		Host:    []string{"/mnt/real/disk.img", "/srv/claims/empty/disk.img"},
	}
	if got := FilesOf(p, res); !reflect.DeepEqual(got, want) {
		t.Errorf("files:\n got %+v\nwant %+v", got, want)
	}
}
