package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestApply: every source applied for real; a second Apply changes nothing (not even after the
// image tag moved); Cleanup removes the VM folder and only it, twice.
func TestApply(t *testing.T) {
	prereq.Root(t) // mknod of a block device node for the Block claim
	e := newEnv(t)
	src := t.TempDir()
	ref := e.reg.Push(t, "vm/disk:v1", storagetest.ContainerDisk(t, qcow2(t, src, "disk.qcow2", 8<<20, "CONTAINER-DISK")))
	kernel, initrd := filepath.Join(src, "vmlinuz"), filepath.Join(src, "initrd")
	writeFile(t, kernel, "kernel")
	writeFile(t, initrd, "initrd")
	kref := e.reg.Push(t, "vm/kernel:v1", storagetest.KernelBoot(t, kernel, initrd))

	existing := filepath.Join(e.hdRoot, "existing.img")
	writeFile(t, existing, "HOST")
	dataClaim, emptyClaim := filepath.Join(e.claims, "data"), filepath.Join(e.claims, "empty")
	writeFile(t, filepath.Join(dataClaim, ClaimImage), string(make([]byte, 1<<20)))
	mkdirAll(t, emptyClaim)
	blk := filepath.Join(e.dir, "blk")
	if err := syscall.Mknod(blk, syscall.S_IFBLK|0o600, int(7<<8|200)); err != nil {
		t.Fatal(err)
	}
	opts := e.opts()
	opts.Claims = map[string]Claim{"data": {Path: dataClaim}, "empty": {Path: emptyClaim, CapacityBytes: 4 << 20},
		"fast": {Path: blk, Mode: Block}}
	opts.KernelBoot = &KernelBoot{Image: kref, KernelPath: storagetest.KernelPath, InitrdPath: storagetest.InitrdPath}
	volumes := []Volume{
		{Name: "root", ContainerDisk: &ContainerDisk{Image: ref}},
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 30}},
		{Name: "created", HostDisk: &HostDisk{Path: filepath.Join(e.hdRoot, "created.img"), Type: HostDiskOrCreate, CapacityBytes: 64 << 20}},
		{Name: "existing", HostDisk: &HostDisk{Path: existing, Type: HostDiskExisting}},
		{Name: "data", PersistentVolumeClaim: &ClaimRef{ClaimName: "data"}},
		{Name: "dv", DataVolume: &ClaimRef{ClaimName: "empty"}},
		{Name: "fast", PersistentVolumeClaim: &ClaimRef{ClaimName: "fast"}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "data"}},
		{Name: "ci", CloudInitNoCloud: &cloudinit.Source{UserData: "#cloud-config\n"}},
	}
	p, err := Plan(volumes, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.host.Apply(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]qemu.Disk{}
	for _, d := range res.Disks {
		byID[d.ID] = d
	}
	// containerDisk: an overlay over the cached, read-only disk of the pulled digest.
	ov := info(t, byID["root"].Path)
	if ov.Format != "qcow2" || ov.BackingFormat != "qcow2" || filepath.Dir(filepath.Dir(ov.BackingFilename)) == "" ||
		!bytes.HasPrefix([]byte(ov.BackingFilename), []byte(e.host.Images.Dir())) || res.Images[ref] == "" {
		t.Errorf("root overlay %+v, images %v", ov, res.Images)
	}
	if em := info(t, byID["scratch"].Path); em.Format != "qcow2" || em.VirtualSize != 1<<30 || em.BackingFilename != "" {
		t.Errorf("empty disk %+v", em)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(byID["created"].Path, &st); err != nil || st.Size != 64<<20 || st.Blocks != 0 {
		t.Errorf("DiskOrCreate file: size %d blocks %d (%v), want a sparse 64 MiB file", st.Size, st.Blocks, err)
	}
	if got := byID["existing"].Path; got != existing {
		t.Errorf("existing host disk path %s", got)
	}
	if fi, err := os.Stat(filepath.Join(emptyClaim, ClaimImage)); err != nil || fi.Size() != 4<<20 {
		t.Errorf("empty claim image: %v, %v", fi, err)
	}
	if got := byID["fast"].Path; got != blk {
		t.Errorf("block claim path %s", got)
	}
	if eph := info(t, byID["eph"].Path); eph.BackingFilename != filepath.Join(dataClaim, ClaimImage) || eph.BackingFormat != "raw" {
		t.Errorf("ephemeral overlay %+v", eph)
	}
	if label, files, err := cloudinit.ReadISO(byID["ci"].Path); err != nil || label != "cidata" || string(files["user-data"]) != "#cloud-config\n" {
		t.Errorf("cloud-init iso: %q %q %v", label, files, err)
	}
	for p, want := range map[string]string{res.Boot.Kernel: "kernel", res.Boot.Initrd: "initrd"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", p, b, err)
		}
	}

	// Apply again, after the tag moved: same files (same inodes), same digest.
	inodes := map[string]uint64{}
	for _, id := range []string{"root", "scratch", "eph", "created"} {
		inodes[id] = inode(t, byID[id].Path)
	}
	e.reg.Push(t, "vm/disk:v1", storagetest.ContainerDisk(t, qcow2(t, src, "disk2.qcow2", 8<<20, "OTHER")))
	res2, err := e.host.Apply(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Images[ref] != res.Images[ref] {
		t.Errorf("second Apply used %s, first %s", res2.Images[ref], res.Images[ref])
	}
	for id, ino := range inodes {
		if inode(t, byID[id].Path) != ino {
			t.Errorf("second Apply replaced %s", id)
		}
	}
	// Nothing half-made is left behind (a re-link of the same kernel used to leave its .tmp:
	// rename(2) of a hard link onto another link of the same inode does nothing).
	tmps, err := filepath.Glob(filepath.Join(e.vmDir, "*", "*.tmp"))
	if err != nil || len(tmps) > 0 {
		t.Errorf("temporary files left after the second Apply: %v %v", tmps, err)
	}

	for range 2 {
		if err := Cleanup(e.vmDir); err != nil {
			t.Fatal(err)
		}
	}
	if exists(e.vmDir) {
		t.Errorf("%s still exists", e.vmDir)
	}
	for _, p := range []string{byID["created"].Path, existing, filepath.Join(dataClaim, ClaimImage), filepath.Join(emptyClaim, ClaimImage), blk} {
		if !exists(p) {
			t.Errorf("Cleanup removed %s, which is not the VM's", p)
		}
	}
}

// TestApplyUndo: a failing step removes what this Apply created (and only that).
func TestApplyUndo(t *testing.T) {
	e := newEnv(t)
	opts := e.opts()
	created := filepath.Join(e.hdRoot, "created.img")
	good := []Volume{{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}}}
	bad := append(append([]Volume{}, good...),
		Volume{Name: "more", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}},
		Volume{Name: "created", HostDisk: &HostDisk{Path: created, Type: HostDiskOrCreate, CapacityBytes: 1 << 20}},
		Volume{Name: "ci", CloudInitNoCloud: &cloudinit.Source{UserData: "x"}},
		Volume{Name: "missing", HostDisk: &HostDisk{Path: filepath.Join(e.hdRoot, "missing.img"), Type: HostDiskExisting}})
	pBad, err := Plan(bad, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.host.Apply(ctxT(t), pBad)
	if !errors.Is(err, ErrNotFound) || Reason(err) != ReasonVolumeNotFound {
		t.Fatalf("Apply = %v (reason %s), want ErrNotFound", err, Reason(err))
	}
	if exists(e.vmDir) || exists(created) {
		t.Errorf("failed first Apply left vm folder %v, created host disk %v", exists(e.vmDir), exists(created))
	}

	pGood, err := Plan(good, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.host.Apply(ctxT(t), pGood)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), pBad); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Apply = %v, want ErrNotFound", err)
	}
	ents, _ := os.ReadDir(filepath.Join(e.vmDir, disksDir))
	if !exists(res.Disks[0].Path) || len(ents) != 1 || exists(created) {
		t.Errorf("failed re-Apply: first disk kept %v, disks/ has %d entries (want 1), created host disk %v",
			exists(res.Disks[0].Path), len(ents), exists(created))
	}
}

// TestApplyConflict: a file at a planned path that is not what the plan would make is refused,
// never overwritten.
func TestApplyConflict(t *testing.T) {
	e := newEnv(t)
	p, err := Plan([]Volume{{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 20}}}, nil, e.opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	p2, err := Plan([]Volume{{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 2 << 20}}}, nil, e.opts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), p2); !errors.Is(err, ErrConflict) {
		t.Fatalf("Apply over a different empty disk = %v, want ErrConflict", err)
	}
	if got := info(t, p.Disks[0].Path).VirtualSize; got != 1<<20 {
		t.Errorf("existing disk changed to %d bytes", got)
	}
}

// TestCleanupRefuses: Cleanup only removes folders Apply made.
func TestCleanupRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "precious"), "x")
	for _, d := range []string{dir, "relative/dir", "/", dir + "/../x"} {
		if err := Cleanup(d); !errors.Is(err, ErrNotStorageDir) {
			t.Errorf("Cleanup(%q) = %v, want ErrNotStorageDir", d, err)
		}
	}
	if !exists(filepath.Join(dir, "precious")) {
		t.Error("Cleanup removed a foreign file")
	}
	empty := filepath.Join(dir, "empty")
	mkdirAll(t, empty)
	if err := Cleanup(empty); err != nil || exists(empty) {
		t.Errorf("Cleanup of an empty folder: %v (exists %v)", err, exists(empty))
	}
}

// TestApplyImageErrors: image failures keep oci's reason through Apply's error, and leave no
// VM folder behind. A failed pull names its image (as planned) and is retryable, as the
// kubelet retries pulls: not found, registry down, not in the cache under Never; what is wrong
// inside a pulled image is not.
func TestApplyImageErrors(t *testing.T) {
	e := newEnv(t)
	empty := storagetest.Image(t, storagetest.Layer(t, storagetest.File{Path: "/etc/hostname", Content: []byte("x")}))
	noDisk := e.reg.Push(t, "vm/nodisk:v1", empty)
	kernelOnly := e.reg.Push(t, "vm/kernel-only:v1", storagetest.Image(t, storagetest.Layer(t,
		storagetest.File{Path: storagetest.KernelPath, Content: []byte("k")})))
	missing, down := e.reg.Host+"/vm/none:v1", "127.0.0.1:1/vm/disk:v1"
	tests := []struct {
		name      string
		vols      []Volume
		kernel    *KernelBoot
		reason    string
		pull      string // the image PullFailed names
		retryable bool
	}{
		{"never pull", []Volume{{Name: "r", ContainerDisk: &ContainerDisk{Image: noDisk, PullPolicy: "Never"}}}, nil, "ErrImageNeverPull", noDisk, true},
		{"not found", []Volume{{Name: "r", ContainerDisk: &ContainerDisk{Image: missing}}}, nil, "ErrImagePull", missing, true},
		{"registry down", []Volume{{Name: "r", ContainerDisk: &ContainerDisk{Image: down}}}, nil, "ErrImagePull", down, true},
		{"kernel not found", nil, &KernelBoot{Image: missing, KernelPath: storagetest.KernelPath}, "ErrImagePull", missing, true},
		{"no disk", []Volume{{Name: "r", ContainerDisk: &ContainerDisk{Image: noDisk}}}, nil, "InvalidContainerDisk", "", false},
		{"no initrd", nil, &KernelBoot{Image: kernelOnly, KernelPath: storagetest.KernelPath, InitrdPath: storagetest.InitrdPath}, "InvalidKernelBootImage", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := e.opts()
			opts.KernelBoot = tt.kernel
			p, err := Plan(tt.vols, nil, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.host.Apply(ctxT(t), p)
			if err == nil || Reason(err) != tt.reason {
				t.Fatalf("Apply = %v, reason %q; want reason %s", err, Reason(err), tt.reason)
			}
			if img, retry := PullFailed(err); img != tt.pull || retry != tt.retryable {
				t.Errorf("PullFailed = %q, %v; want %q, %v", img, retry, tt.pull, tt.retryable)
			}
			if exists(e.vmDir) {
				t.Error("failed Apply left the vm folder")
			}
		})
	}
}

// TestReasonInvalidImageName: a reference that does not parse is refused by Plan with the
// kubelet's InvalidImageName, final (no pull to retry).
func TestReasonInvalidImageName(t *testing.T) {
	opts := planOpts()
	opts.VMDir = t.TempDir()
	for _, image := range []string{"UPPER/case:tag", "Bad Image", "oci:relative/dir"} {
		_, err := Plan([]Volume{{Name: "a", ContainerDisk: &ContainerDisk{Image: image}}}, nil, opts)
		if Reason(err) != "InvalidImageName" {
			t.Errorf("Plan(%q) = %v, reason %q; want InvalidImageName", image, err, Reason(err))
		}
		if img, retry := PullFailed(err); img != "" || retry {
			t.Errorf("PullFailed(%v) = %q, %v; want nothing to retry", err, img, retry)
		}
	}
}
