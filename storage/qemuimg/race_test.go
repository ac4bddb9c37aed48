package qemuimg_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/storage/qemuimg"
)

// TestCreateQCOW2NeverFollowsASwappedName: the image's name is swapped for a symlink to a
// canary after CreateQCOW2 claimed it and before qemu-img runs (as the VM's user, who owns the
// folder, could): qemu-img still writes the claimed file, and the canary is untouched. The race
// is made deterministic by a stand-in qemu-img that swaps the name, then runs the real one.
func TestCreateQCOW2NeverFollowsASwappedName(t *testing.T) {
	real, err := exec.LookPath(qemuimg.DefaultBinary)
	if err != nil {
		t.Fatalf("qemu-img: %v", err)
	}
	dir := t.TempDir()
	canary := filepath.Join(dir, "canary")
	want := []byte("not a disk: must stay as it is\n")
	if err := os.WriteFile(canary, want, 0o600); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "disk.qcow2")
	standIn := filepath.Join(dir, "qemu-img")
	script := "#!/bin/sh\nmv '" + disk + "' '" + disk + ".claimed' && ln -s '" + canary + "' '" + disk + "' || exit 99\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(standIn, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := (qemuimg.Tool{Binary: standIn}).CreateQCOW2(ctx, disk, qemuimg.CreateOptions{SizeBytes: 1 << 20}); err != nil {
		t.Fatalf("CreateQCOW2: %v", err)
	}
	if got, _ := os.ReadFile(canary); !bytes.Equal(got, want) {
		t.Errorf("the canary behind the swapped name was written: %d bytes, %q…", len(got), got[:min(len(got), 16)])
	}
	if got, _ := os.ReadFile(disk + ".claimed"); !bytes.HasPrefix(got, []byte("QFI\xfb")) {
		t.Errorf("the claimed file is not the qcow2 image: %q…", got[:min(len(got), 16)])
	}
}
