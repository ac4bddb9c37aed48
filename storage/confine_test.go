package storage

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestHostDiskConfinement: host disk paths cannot leave the root, by symlink or "..", whether
// the file exists or would be created; symlinks that stay inside are followed, and QEMU gets the
// real path.
func TestHostDiskConfinement(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.dir, "outside")
	writeFile(t, filepath.Join(outside, "secret.img"), "secret")
	r := e.hdRoot
	writeFile(t, filepath.Join(r, "inner", "disk.img"), "disk")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(r, "dirlink")))                          // absolute, to a folder outside
	must(os.Symlink(filepath.Join(outside, "secret.img"), filepath.Join(r, "abs"))) // absolute, to a file outside
	must(os.Symlink("../outside/secret.img", filepath.Join(r, "rel")))              // relative, climbing out
	must(os.Symlink("inner/disk.img", filepath.Join(r, "ok-link")))                 // relative, staying inside
	must(os.Symlink("../inner/disk.img", filepath.Join(r, "inner", "up-and-in")))
	must(os.Symlink("/etc/passwd", filepath.Join(r, "dangling-abs")))
	must(os.Symlink("../outside/new.img", filepath.Join(r, "dangling-rel")))
	must(syscall.Mkfifo(filepath.Join(r, "fifo"), 0o600))

	tests := []struct {
		name     string
		path     string
		create   bool
		wantReal string
		target   error
	}{
		{"plain", "inner/disk.img", false, filepath.Join(r, "inner/disk.img"), nil},
		{"symlink inside", "ok-link", false, filepath.Join(r, "inner/disk.img"), nil},
		{"symlink up and back in", "inner/up-and-in", false, filepath.Join(r, "inner/disk.img"), nil},
		{"created", "inner/new.img", true, filepath.Join(r, "inner/new.img"), nil},
		{"folder symlink out", "dirlink/secret.img", false, "", ErrOutsideRoot},
		{"file symlink out", "abs", false, "", ErrOutsideRoot},
		{"relative symlink out", "rel", false, "", ErrOutsideRoot},
		{"create through folder symlink", "dirlink/new.img", true, "", ErrOutsideRoot},
		{"create through dangling absolute symlink", "dangling-abs", true, "", ErrOutsideRoot},
		{"create through dangling relative symlink", "dangling-rel", true, "", ErrOutsideRoot},
		{"missing", "inner/none.img", false, "", ErrNotFound},
		{"missing folder", "none/new.img", true, "", ErrNotFound},
		{"folder", "inner", false, "", ErrNotDiskFile},
		{"fifo", "fifo", false, "", ErrNotDiskFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hd := &HostDisk{Path: filepath.Join(r, tt.path), Type: HostDiskExisting}
			if tt.create {
				hd.Type, hd.CapacityBytes = HostDiskOrCreate, 1<<20
			}
			p, err := Plan([]Volume{{Name: "hd", HostDisk: hd}}, nil, e.opts())
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.host.Apply(ctxT(t), p)
			if tt.target != nil {
				if !errors.Is(err, tt.target) {
					t.Fatalf("Apply = %v, want %v", err, tt.target)
				}
				if errors.Is(tt.target, ErrOutsideRoot) && Reason(err) != ReasonPathNotAllowed {
					t.Errorf("reason %s", Reason(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Disks[0].Path; got != tt.wantReal {
				t.Errorf("disk path %s, want the real path %s", got, tt.wantReal)
			}
			if err := Cleanup(e.vmDir); err != nil {
				t.Fatal(err)
			}
		})
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("something was created outside the root: %d entries", len(ents))
	}
}

// TestClaimConfinement: a claim's disk.img cannot be a symlink out of the claim folder.
func TestClaimConfinement(t *testing.T) {
	e := newEnv(t)
	claim := filepath.Join(e.claims, "evil")
	mkdirAll(t, claim)
	if err := os.Symlink("/etc/shadow", filepath.Join(claim, ClaimImage)); err != nil {
		t.Fatal(err)
	}
	opts := e.opts()
	opts.Claims = map[string]Claim{"evil": {Path: claim, CapacityBytes: 1 << 20}}
	for _, v := range []Volume{
		{Name: "pvc", PersistentVolumeClaim: &ClaimRef{ClaimName: "evil"}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "evil"}},
	} {
		p, err := Plan([]Volume{v}, nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.host.Apply(ctxT(t), p); !errors.Is(err, ErrOutsideRoot) {
			t.Errorf("%s: Apply = %v, want ErrOutsideRoot", v.Name, err)
		}
	}
	// A Block claim that is a regular file is refused.
	opts.Claims = map[string]Claim{"notblock": {Path: filepath.Join(e.hdRoot), Mode: Block}}
	p, err := Plan([]Volume{{Name: "b", PersistentVolumeClaim: &ClaimRef{ClaimName: "notblock"}}}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Apply(ctxT(t), p); !errors.Is(err, ErrNotDiskFile) {
		t.Errorf("Block claim on a folder: %v, want ErrNotDiskFile", err)
	}
}

// TestHostDiskTwoVolumes: one host file behind two volumes (the same path, or a symlink to it)
// fails Apply with a reason and leaves nothing made; QEMU would fail on its image lock on
// every retry instead.
func TestHostDiskTwoVolumes(t *testing.T) {
	e := newEnv(t)
	r := e.hdRoot
	writeFile(t, filepath.Join(r, "disk.img"), "disk")
	if err := os.Symlink("disk.img", filepath.Join(r, "alias")); err != nil {
		t.Fatal(err)
	}
	for name, second := range map[string]string{"same path": "disk.img", "symlink": "alias"} {
		t.Run(name, func(t *testing.T) {
			p, err := Plan([]Volume{
				{Name: "one", HostDisk: &HostDisk{Path: filepath.Join(r, "disk.img"), Type: HostDiskExisting}},
				{Name: "two", HostDisk: &HostDisk{Path: filepath.Join(r, second), Type: HostDiskExisting}},
			}, nil, e.opts())
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.host.Apply(ctxT(t), p)
			if ve, ok := errors.AsType[*VolumeError](err); !ok || ve.Volume != "two" || !errors.Is(err, ErrInvalidVolume) || Reason(err) != ReasonInvalidVolume {
				t.Fatalf("Apply = %v, want an InvalidVolume error about volume two", err)
			}
			if exists(e.vmDir) {
				t.Errorf("the failed Apply left %s", e.vmDir)
			}
		})
	}
}
