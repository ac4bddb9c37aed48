package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestImageDirsKernelBoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "boot"), 0o755))
	must(os.WriteFile(filepath.Join(root, "boot", "vmlinuz"), []byte("k"), 0o644))
	must(os.WriteFile(filepath.Join(root, "boot", "initrd"), []byte("i"), 0o644))
	must(os.WriteFile(filepath.Join(root, "boot", "empty"), nil, 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "boot", "escape")))
	m := ImageDirs{"demo:1": root}

	k, i, err := m.KernelBoot("demo:1", "/boot/vmlinuz", "boot/initrd")
	if err != nil || filepath.Base(k) != "vmlinuz" || filepath.Base(i) != "initrd" {
		t.Fatalf("KernelBoot = %q, %q, %v", k, i, err)
	}
	if _, _, err := m.KernelBoot("other:1", "/boot/vmlinuz", ""); !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("unknown image: %v", err)
	}
	for _, p := range []string{"/boot/escape", "../../" + outside + "/secret", "/boot/empty", "/boot", "/nope", ""} {
		if _, _, err := m.KernelBoot("demo:1", p, ""); err == nil {
			t.Errorf("kernelPath %q accepted", p)
		}
	}
}
