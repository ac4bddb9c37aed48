package qemu

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// fakeUnixVM is fakeVM over a unix socket, which carries SCM_RIGHTS (add-fd), with 4 free
// root ports and no devices.
func fakeUnixVM(t *testing.T) (*VM, *qmptest.Server) {
	t.Helper()
	srv := qmptest.NewServer(qmptest.Options{})
	t.Cleanup(func() { srv.Close() })
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	mon, err := qmp.Dial(unitCtx(t), sock, qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close() })
	vm := &VM{mon: mon, proc: &process{done: make(chan struct{})}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), rootPorts: 4}
	return vm, srv
}

// TestDiskFilesRefused: handed files QEMU could not use (not a regular file or block device,
// no file of the access mode QEMU opens with, different files, too many, nil, a SATA disk)
// are refused as an invalid spec before any command reaches QEMU.
func TestDiskFilesRefused(t *testing.T) {
	vm, srv := fakeUnixVM(t)
	dir := t.TempDir()
	img, other := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	for _, p := range []string{img, other} {
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	open := func(path string, flag int) *os.File {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(pair[0]), "sock")
	defer sock.Close()
	unix.Close(pair[1])
	rw, ro := open(img, os.O_RDWR), open(img, os.O_RDONLY)
	for _, tt := range []struct {
		name string
		disk Disk
		want string // in the error
	}{
		{"pipe", Disk{ReadOnly: true, Files: []*os.File{pr}}, "regular file or a block device"},
		{"socket", Disk{Files: []*os.File{sock}}, "regular file or a block device"},
		{"directory", Disk{ReadOnly: true, Files: []*os.File{open(dir, os.O_RDONLY)}}, "regular file or a block device"},
		{"writable disk, read-only file", Disk{Files: []*os.File{ro}}, "needs an O_RDWR file"},
		{"read-only disk, read-write file", Disk{ReadOnly: true, Files: []*os.File{rw}}, "needs an O_RDONLY file"},
		{"write-only file", Disk{Files: []*os.File{rw, open(img, os.O_WRONLY)}}, "write-only"},
		{"two images", Disk{Files: []*os.File{rw, open(other, os.O_RDONLY)}}, "not the same file"},
		{"too many", Disk{Files: []*os.File{rw, rw, rw, rw, rw}}, "at most 4"},
		{"nil", Disk{Files: []*os.File{rw, nil}}, "is nil"},
		{"sata", Disk{Bus: BusSATA, Files: []*os.File{rw}}, "sata"},
	} {
		d := tt.disk
		d.ID, d.Path = "fdd", noSuchImage
		err := vm.AddDisk(unitCtx(t), d)
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("AddDisk %s: %v, want ErrInvalidSpec saying %q", tt.name, err, tt.want)
		}
		// Start checks the same before QEMU runs: Validate (pure) or checkSpecFiles.
		s := &Spec{Disks: []Disk{d}}
		if err := s.validateDevices(); err == nil {
			err = checkSpecFiles(s)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("Start's checks of %s: %v, want ErrInvalidSpec", tt.name, err)
			}
		}
	}
	if got := sent(srv); len(got) != 0 {
		t.Errorf("refused disks reached QEMU: %s", join(got))
	}
	if err := checkSpecFiles(&Spec{Disks: []Disk{{ID: "ok", Path: noSuchImage, Files: []*os.File{rw, ro}}}}); err != nil {
		t.Errorf("a writable disk with O_RDWR and O_RDONLY files refused: %v", err)
	}
}

// TestDiskFilesQMP: a disk given as files is added with add-fd (each file in SCM_RIGHTS) into
// a fresh fdset from 100 up whose /dev/fdset/N the file node opens; a failed device_add
// removes the fdset after the nodes; RemoveDisk removes it after blockdev-del.
func TestDiskFilesQMP(t *testing.T) {
	vm, srv := fakeUnixVM(t)
	srv.On("device_add").Do(func(c qmptest.Command) (any, *qmptest.Error) {
		if strings.Contains(string(c.Args), `"bad"`) {
			return nil, &qmptest.Error{Class: "GenericError", Desc: "scripted failure"}
		}
		return map[string]any{}, nil
	})
	srv.On("device_del").Emit("DEVICE_DELETED", map[string]any{"device": "fdd", "path": "/machine/peripheral/fdd"})
	for _, c := range []string{"add-fd", "blockdev-add", "blockdev-del", "remove-fd"} {
		srv.On(c)
	}
	img := labelImage(t, "x", 4096)
	rw, ro := openImage(t, img, os.O_RDWR), openImage(t, img, os.O_RDONLY)
	if err := vm.AddDisk(unitCtx(t), Disk{ID: "fdd", Path: noSuchImage, Files: []*os.File{rw, ro}}); err != nil {
		t.Fatal(err)
	}
	if err := vm.AddDisk(unitCtx(t), Disk{ID: "bad", Path: noSuchImage, Files: []*os.File{rw}}); err == nil {
		t.Fatal("AddDisk with a failing device_add succeeded")
	}
	if err := vm.RemoveDisk(unitCtx(t), "fdd"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range srv.Commands() {
		var a map[string]any
		_ = json.Unmarshal(c.Args, &a)
		switch c.Name {
		case "qmp_capabilities":
			continue
		case "add-fd":
			got = append(got, c.Name+" "+jsonOf(a)+" files="+jsonOf(len(c.Files)))
		case "blockdev-add":
			got = append(got, c.Name+" "+jsonOf(a["node-name"])+" "+jsonOf(a["filename"]))
		default:
			got = append(got, c.Name+" "+jsonOf(a))
		}
	}
	want := []string{
		`add-fd {"fdset-id":100,"opaque":"disk fdd"} files=1`,
		`add-fd {"fdset-id":100,"opaque":"disk fdd"} files=1`,
		`blockdev-add "f_fdd" "/dev/fdset/100"`,
		`blockdev-add "d_fdd" null`,
		`device_add {"addr":"0x0","bus":"rp_1","drive":"d_fdd","driver":"virtio-blk-pci","id":"fdd","write-cache":"on"}`,
		`add-fd {"fdset-id":101,"opaque":"disk bad"} files=1`,
		`blockdev-add "f_bad" "/dev/fdset/101"`,
		`blockdev-add "d_bad" null`,
		`device_add {"addr":"0x0","bus":"rp_2","drive":"d_bad","driver":"virtio-blk-pci","id":"bad","write-cache":"on"}`,
		`blockdev-del {"node-name":"d_bad"}`,
		`blockdev-del {"node-name":"f_bad"}`,
		`remove-fd {"fdset-id":101}`,
		`device_del {"id":"fdd"}`,
		`blockdev-del {"node-name":"d_fdd"}`,
		`blockdev-del {"node-name":"f_fdd"}`,
		`remove-fd {"fdset-id":100}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands sent:\n  %s\nwant:\n  %s", join(got), join(want))
	}
	if d := vm.Disks(); len(d) != 0 {
		t.Errorf("Disks() = %+v", d)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
