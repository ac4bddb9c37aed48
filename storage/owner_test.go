package storage

import (
	"io/fs"
	"reflect"
	"testing"

	"github.com/vmlet/vmlet/storage/cloudinit"
)

// TestGrants: the VM's user gets the VM folder and what Apply makes in it, private, and the
// host disks and claims it is given (resolved paths, modes kept); never the shared image cache
// (containerDisk bases, the kernel links).
func TestGrants(t *testing.T) {
	volumes := []Volume{
		{Name: "root", ContainerDisk: &ContainerDisk{Image: image}},
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 30}},
		{Name: "host", HostDisk: &HostDisk{Path: hdRoot + "/vm1/disk.img", Type: HostDiskOrCreate, CapacityBytes: 1 << 20}},
		{Name: "data", PersistentVolumeClaim: &ClaimRef{ClaimName: "data", ReadOnly: true}},
		{Name: "fast", PersistentVolumeClaim: &ClaimRef{ClaimName: "fast"}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "empty"}},
		{Name: "cloudinit", CloudInitNoCloud: &cloudinit.Source{UserData: "#cloud-config\n"}},
	}
	opts := planOpts()
	opts.KernelBoot = &KernelBoot{Image: kimage, KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}
	opts.Owner = &Owner{UID: 107, GID: 108}
	p, err := Plan(volumes, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.Owner == nil || *p.Owner != *opts.Owner {
		t.Fatalf("plan owner %v, want %v", p.Owner, opts.Owner)
	}
	resolved := map[string]string{"host": "/mnt/real/disk.img", "data": "/srv/real/data/disk.img"}
	got := Grants(p, resolved, *p.Owner)
	g := func(path string, mode uint32) Grant { return Grant{Path: path, UID: 107, GID: 108, Mode: fsMode(mode)} }
	d := vmDir + "/disks/"
	want := []Grant{
		g(vmDir, 0o700), g(vmDir+"/disks", 0o700), g(vmDir+"/boot", 0o700),
		g(d+"root.qcow2", 0o600),
		g(d+"scratch.qcow2", 0o600),
		g("/mnt/real/disk.img", 0),
		g("/srv/real/data/disk.img", 0),
		g("/dev/vg0/fast", 0),
		g(d+"eph.qcow2", 0o600), g("/srv/claims/empty/disk.img", 0),
		g(d+"cloudinit.iso", 0o600),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("grants:\n got %v\nwant %v", got, want)
	}
	for _, gr := range got {
		for _, a := range p.Actions {
			if (a.Kind == ActLinkKernel && (gr.Path == a.Path || gr.Path == a.Initrd)) || (a.Kind == ActPull && gr.Path == a.Image) {
				t.Errorf("grant %v touches the shared image cache", gr)
			}
		}
	}
}

func fsMode(m uint32) fs.FileMode { return fs.FileMode(m) }
