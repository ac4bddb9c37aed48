package storage

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/qemuimg"
	"github.com/vmlet/vmlet/test/prereq"
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
	host := func(volume, path string) Grant { gr := g(path, 0); gr.Volume = volume; return gr }
	d := vmDir + "/disks/"
	want := []Grant{
		g(vmDir, 0o700), g(vmDir+"/disks", 0o700), g(vmDir+"/boot", 0o700),
		g(d+"root.qcow2", 0o600),
		g(d+"scratch.qcow2", 0o600),
		host("host", "/mnt/real/disk.img"),
		host("data", "/srv/real/data/disk.img"),
		host("fast", "/dev/vg0/fast"),
		g(d+"eph.qcow2", 0o600), host("eph", "/srv/claims/empty/disk.img"),
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

// TestApplyOwner: with an Owner, Apply hands the VM folder and the files it makes (0700/0600)
// and the host disk it is given to that user, leaves the shared cache alone, and refuses a host
// disk whose folder the user cannot pass (HostPathNotAllowed) instead of letting QEMU fail.
func TestApplyOwner(t *testing.T) {
	prereq.Root(t) // to chown
	e := newEnv(t)
	for _, d := range []string{e.dir, filepath.Dir(e.dir)} {
		if err := os.Chmod(d, 0o711); err != nil { // t.TempDir's folders are 0700
			t.Fatal(err)
		}
	}
	opts := e.opts()
	opts.Owner = &Owner{UID: 107, GID: 107}
	host := filepath.Join(e.hdRoot, "host.img")
	p, err := Plan([]Volume{
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}},
		{Name: "host", HostDisk: &HostDisk{Path: host, Type: HostDiskOrCreate, CapacityBytes: 1 << 20}},
	}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]fs.FileMode{
		e.vmDir: 0o700, filepath.Join(e.vmDir, disksDir): 0o700,
		filepath.Join(e.vmDir, disksDir, "scratch.qcow2"): 0o600, host: 0,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 107 || st.Gid != 107 || (mode != 0 && fi.Mode().Perm() != mode) {
			t.Errorf("%s: %d:%d %v, want 107:107 %v", path, st.Uid, st.Gid, fi.Mode().Perm(), mode)
		}
	}

	locked := filepath.Join(e.dir, "locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	opts.HostDiskRoot, opts.VMDir = locked, filepath.Join(e.dir, "vms", "vm2")
	p2, err := Plan([]Volume{{Name: "host", HostDisk: &HostDisk{Path: filepath.Join(locked, "d.img"), Type: HostDiskOrCreate, CapacityBytes: 1 << 20}}}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.host.Apply(ctxT(t), p2)
	var ve *VolumeError
	if !errors.Is(err, ErrNotSearchable) || Reason(err) != ReasonPathNotAllowed || !errors.As(err, &ve) || ve.Volume != "host" {
		t.Fatalf("Apply under a 0700 root: %v (reason %s), want volume host ErrNotSearchable", err, Reason(err))
	}
	if exists(opts.VMDir) || exists(filepath.Join(locked, "d.img")) {
		t.Error("the refused Apply left files behind")
	}
}

// TestApplyPrivateWithoutOwner: with root launchers (no Owner, --launcher-uid 0) nothing is
// handed over, so the VM folder must be private from its mkdir on: no other local user lists
// it or reads a disk or cloud-init ISO in it (qemu-img makes images 0644, ISOs are 0444). The
// same holds during an Apply with an Owner, until the grants run.
func TestApplyPrivateWithoutOwner(t *testing.T) {
	e := newEnv(t)
	p, err := Plan([]Volume{
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}},
		{Name: "ci", CloudInitNoCloud: &cloudinit.Source{UserData: "#cloud-config\npassword: secret\n"}},
	}, nil, e.opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{e.vmDir, filepath.Join(e.vmDir, disksDir), filepath.Join(e.vmDir, bootDir), filepath.Join(e.vmDir, stateFile)} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v, want no group or other access", path, fi.Mode())
		}
	}
}

// TestApplyRefusesPlantedSymlinks: the VM's user owns its VM folder, so it can rename what is
// in it. A symlink it planted is never followed by the next Apply (an agent restart, a
// hotplug): disks/ pointing at a root folder is refused before anything is made in it, and a
// disk replaced by a symlink to a root-owned image of the same shape is not handed over.
// Before, both targets were chowned to the VM's user (disks/ → /etc: the user owns /etc).
func TestApplyRefusesPlantedSymlinks(t *testing.T) {
	prereq.Root(t) // to chown
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, e *env) string // returns the target that must stay root's
	}{
		{"disks folder", func(t *testing.T, e *env) string {
			victim := filepath.Join(e.dir, "victim")
			mkdirAll(t, victim)
			disks := filepath.Join(e.vmDir, disksDir)
			if err := os.Rename(disks, disks+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, disks); err != nil {
				t.Fatal(err)
			}
			return victim
		}},
		{"disk file", func(t *testing.T, e *env) string {
			victim := filepath.Join(e.dir, "victim.qcow2")
			if err := e.host.QemuImg.CreateQCOW2(ctxT(t), victim, qemuimg.CreateOptions{SizeBytes: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			disk := filepath.Join(e.vmDir, disksDir, "scratch.qcow2")
			if err := os.Remove(disk); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, disk); err != nil {
				t.Fatal(err)
			}
			return victim
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for _, d := range []string{e.dir, filepath.Dir(e.dir)} {
				if err := os.Chmod(d, 0o711); err != nil {
					t.Fatal(err)
				}
			}
			opts := e.opts()
			opts.Owner = &Owner{UID: 107, GID: 107}
			p, err := Plan([]Volume{{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}}}, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.host.Apply(ctxT(t), p); err != nil {
				t.Fatal(err)
			}
			victim := c.plant(t, e)
			if _, err := e.host.Apply(ctxT(t), p); !errors.Is(err, ErrOutsideRoot) {
				t.Errorf("Apply after the plant: %v, want ErrOutsideRoot", err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(victim, &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != 0 || st.Gid != 0 {
				t.Errorf("%s handed to %d:%d through the planted symlink", victim, st.Uid, st.Gid)
			}
			if ents, _ := os.ReadDir(victim); len(ents) > 0 {
				t.Errorf("Apply made %v in %s through the planted symlink", ents, victim)
			}
		})
	}
}
