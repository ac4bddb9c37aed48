package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestBlockPaths: the block devices a plan opens, read-only where every use is.
func TestBlockPaths(t *testing.T) {
	opts := Options{VMDir: vmDir, Claims: map[string]Claim{
		"fast": {Path: "/dev/vg0/fast", Mode: Block},
		"slow": {Path: "/dev/vg0/slow", Mode: Block},
		"gold": {Path: "/dev/vg0/gold", Mode: Block},
		"fs":   {Path: "/srv/claims/fs"},
	}}
	p, err := Plan([]Volume{
		{Name: "fs", PersistentVolumeClaim: &ClaimRef{ClaimName: "fs"}},
		{Name: "fast", PersistentVolumeClaim: &ClaimRef{ClaimName: "fast"}},
		{Name: "slow", DataVolume: &ClaimRef{ClaimName: "slow"}},
		{Name: "ro", PersistentVolumeClaim: &ClaimRef{ClaimName: "fast", ReadOnly: true}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "gold"}},
	}, []DiskRequest{{Name: "slow", ReadOnly: true}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := []BlockPath{
		{Path: "/dev/vg0/fast"},
		{Path: "/dev/vg0/slow", ReadOnly: true}, // its disk is read-only
		{Path: "/dev/vg0/fast", ReadOnly: true},
		{Path: "/dev/vg0/gold", ReadOnly: true}, // an overlay's backing device
	}
	if d := cmp.Diff(want, p.BlockPaths()); d != "" {
		t.Errorf("BlockPaths (-want +got):\n%s", d)
	}
}

// TestBlockDevices stats a real loop device (through a symlink, as /dev/disk/by-* names are)
// and refuses a regular file where a block device is planned.
func TestBlockDevices(t *testing.T) {
	prereq.Root(t)
	dir := t.TempDir()
	dev := loopdev.Attach(t, filepath.Join(dir, "blk.img"), "", 1<<20)
	img := filepath.Join(dir, "regular.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "by-name")
	if err := os.Symlink(dev, link); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	plan := func(path string) *VMPlan {
		p, err := Plan([]Volume{{Name: "blk", PersistentVolumeClaim: &ClaimRef{ClaimName: "blk"}}}, nil,
			Options{VMDir: vmDir, Claims: map[string]Claim{"blk": {Path: path, Mode: Block}}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := plan(link).BlockDevices()
	if err != nil {
		t.Fatal(err)
	}
	want := []BlockDevice{{BlockPath: BlockPath{Path: link}, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("BlockDevices (-want +got):\n%s", d)
	}
	if _, err := plan(img).BlockDevices(); !errors.Is(err, ErrNotDiskFile) {
		t.Errorf("a regular file as a block claim: err = %v, want ErrNotDiskFile", err)
	}
	if _, err := plan(filepath.Join(dir, "gone")).BlockDevices(); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing block claim: err = %v, want ErrNotFound", err)
	}
}
