package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/testguest"
)

// noSuchImage is a disk Path that does not exist: a guest that reads the disk's bytes proves
// QEMU opened the handed fd, not the path.
const noSuchImage = "/nonexistent/vmlet/handed.img"

// TestDiskFilesHotplug: disks given only as open files (a regular file with cache none, then a
// read-only block device) are hotplugged while their Path does not exist; the guest reads the
// bytes written into them beforehand and its writes land in the file; QEMU's own fd of the
// image has O_DIRECT (set on the fdset's dup); RemoveDisk leaves no fdset and no fd of the
// image in QEMU. A device_add that fails removes the disk's fdset with its nodes.
func TestDiskFilesHotplug(t *testing.T) {
	vm := startGuest(t, guestSpec(t, guestOpts{hotplugPorts: 2}))
	vm.waitReady(t)
	ctx := ctxT(t, opTimeout)

	const label = "VMLET-HANDED-FILE"
	img := labelImage(t, label, 1<<20)
	rw, ro := openImage(t, img, os.O_RDWR), openImage(t, img, os.O_RDONLY)
	from := vm.console.Len()
	d := Disk{ID: "fdd", Path: noSuchImage, Files: []*os.File{rw, ro}, Cache: CacheNone, BootIndex: 1}
	if err := vm.AddDisk(ctx, d); err != nil {
		t.Fatal(err)
	}
	rw.Close() // QEMU holds its own copies
	ro.Close()
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerDiskAdded+" vda"); err != nil {
		t.Fatal(err)
	}
	if got := vm.sh(t, fmt.Sprintf("head -c %d /dev/vda", len(label))); got != label {
		t.Fatalf("disk given as files reads %q, want %q", got, label)
	}
	vm.sh(t, "printf guest-wrote | dd of=/dev/vda bs=512 seek=8 conv=fsync 2>/dev/null")
	if got := readAt(t, img, 4096, len("guest-wrote")); got != "guest-wrote" {
		t.Errorf("the guest's write reads %q in the image", got)
	}
	if sets := fdsets(t, vm); len(sets["disk fdd"]) != 2 {
		t.Errorf("query-fdsets = %v, want one set of 2 fds for disk fdd", sets)
	}
	fds := qemuFDsOf(t, vm, img)
	direct := false
	for _, fl := range fds {
		direct = direct || (fl&unix.O_DIRECT != 0 && fl&unix.O_ACCMODE == unix.O_RDWR)
	}
	if !direct {
		t.Errorf("no O_RDWR|O_DIRECT fd of the image in QEMU (flags %v): cache none lost", fds)
	}

	// device_add fails (boot index 1 is fdd's): the new disk's fdset goes with its nodes.
	other := labelImage(t, "other", 1<<20)
	bad := Disk{ID: "bad", Path: noSuchImage, Files: []*os.File{openImage(t, other, os.O_RDWR)}, BootIndex: 1}
	if err := vm.AddDisk(ctx, bad); err == nil {
		t.Fatal("AddDisk with a taken boot index succeeded")
	}
	if sets := fdsets(t, vm); sets["disk bad"] != nil {
		t.Errorf("fdset of a failed AddDisk left behind: %v", sets)
	}
	if nodes := blockNodes(t, vm); nodes["f_bad"] || nodes["d_bad"] {
		t.Errorf("nodes of a failed AddDisk left behind: %v", nodes)
	}

	from = vm.console.Len()
	if err := vm.RemoveDisk(ctx, "fdd"); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerDiskRemoved+" vda"); err != nil {
		t.Fatal(err)
	}
	if sets := fdsets(t, vm); len(sets) != 0 {
		t.Errorf("query-fdsets = %v after RemoveDisk, want none", sets)
	}
	if fds := qemuFDsOf(t, vm, img); len(fds) != 0 {
		t.Errorf("QEMU still holds %d fds of the image after RemoveDisk", len(fds))
	}

	const blkLabel = "VMLET-HANDED-BLK"
	dev := loopdev.Attach(t, filepath.Join(t.TempDir(), "blk.img"), blkLabel, 1<<20)
	from = vm.console.Len()
	blk := Disk{ID: "blk", Path: noSuchImage, ReadOnly: true, Files: []*os.File{openImage(t, dev, os.O_RDONLY)}}
	if err := vm.AddDisk(ctx, blk); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerDiskAdded+" vda"); err != nil {
		t.Fatal(err)
	}
	if got := vm.sh(t, fmt.Sprintf("head -c %d /dev/vda", len(blkLabel))); got != blkLabel {
		t.Fatalf("block device given as a file reads %q", got)
	}
	if drv := nodeDriver(t, vm, "f_blk"); drv != "host_device" {
		t.Errorf("file node of a handed block device has driver %q, want host_device", drv)
	}
}

// TestDiskFilesColdPlugMigrate: a disk given as a file is cold-plugged by Start (Path does not
// exist), and a migration target started with its own handed file of the same image takes
// the guest over: the guest reads, on the target, what it wrote on the source.
func TestDiskFilesColdPlugMigrate(t *testing.T) {
	const label = "VMLET-COLD-FILE"
	img := labelImage(t, label, 1<<20)
	disk := Disk{ID: "cold", Path: noSuchImage, Files: []*os.File{openImage(t, img, os.O_RDWR)}, Cache: CacheNone}
	src := startGuest(t, guestSpec(t, guestOpts{migratable: true, mutate: func(s *Spec) { s.Disks = []Disk{disk} }}))
	src.waitReady(t)
	if got := src.sh(t, fmt.Sprintf("head -c %d /dev/vda", len(label))); got != label {
		t.Fatalf("cold-plugged disk given as a file reads %q", got)
	}
	src.sh(t, "printf before-migration | dd of=/dev/vda bs=512 seek=8 conv=fsync 2>/dev/null")

	spec := src.MigrationSpec()
	if spec.Disks[0].Files != nil {
		t.Fatal("MigrationSpec kept the source's files")
	}
	spec.Disks[0].Files = []*os.File{openImage(t, img, os.O_RDWR)}
	dir := shortTempDir(t, "vt")
	spec.Name += "-target"
	spec.Serial = &Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")}
	spec.Agent = &Agent{Socket: filepath.Join(dir, "qga.sock")}
	dst := startGuest(t, &spec)
	migration{}.run(t, src, dst)
	if err := src.Quit(ctxT(t, opTimeout)); err != nil {
		t.Fatal(err)
	}
	if got := dst.sh(t, "dd if=/dev/vda bs=512 skip=8 count=1 2>/dev/null | head -c 16"); got != "before-migration" {
		t.Errorf("target guest reads %q where the source guest wrote", got)
	}
}

// labelImage writes a raw image of size bytes that starts with label.
func labelImage(t testing.TB, label string, size int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "image.raw")
	if err := os.WriteFile(img, []byte(label), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	return img
}

// openImage opens path with flag; the test's cleanup closes it.
func openImage(t testing.TB, path string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fdsets maps each fdset's opaque to its fds. QMP: query-fdsets.
func fdsets(t testing.TB, vm *testVM) map[string][]int {
	t.Helper()
	var sets []struct {
		ID  int `json:"fdset-id"`
		FDs []struct {
			FD     int    `json:"fd"`
			Opaque string `json:"opaque"`
		} `json:"fds"`
	}
	if err := vm.Monitor().Execute(ctxT(t, opTimeout), "query-fdsets", nil, &sets); err != nil {
		t.Fatal(err)
	}
	m := map[string][]int{}
	for _, s := range sets {
		if s.ID == serialLogSet {
			continue
		}
		if len(s.FDs) == 0 {
			m[strconv.Itoa(s.ID)] = nil
		}
		for _, fd := range s.FDs {
			m[fd.Opaque] = append(m[fd.Opaque], fd.FD)
		}
	}
	return m
}

// qemuFDsOf returns the status flags of QEMU's fds open on path (from /proc/PID/fdinfo).
func qemuFDsOf(t testing.TB, vm *testVM, path string) map[string]int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", vm.Info().PID)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || target != path {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", vm.Info().PID, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				fl, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				if err != nil {
					t.Fatal(err)
				}
				out[e.Name()] = int(fl)
			}
		}
	}
	return out
}

// nodeDriver is the block driver of node. QMP: query-named-block-nodes.
func nodeDriver(t testing.TB, vm *testVM, node string) string {
	t.Helper()
	var nodes []struct {
		NodeName string `json:"node-name"`
		Drv      string `json:"drv"`
	}
	if err := vm.Monitor().Execute(ctxT(t, opTimeout), "query-named-block-nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.NodeName == node {
			return n.Drv
		}
	}
	t.Fatalf("no block node %s", node)
	return ""
}
