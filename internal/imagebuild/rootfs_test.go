package imagebuild

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestFromRoot: listed files come from an unpacked package tree, placed under merged /usr,
// symlinks kept (pointing at /usr paths) with their targets, modes 0755/0644.
func TestFromRoot(t *testing.T) {
	root := t.TempDir()
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("/usr/bin/qemu-system-x86_64", 0o700)
	mk("/lib/x86_64-linux-gnu/libz.so.1.2.13", 0o600)
	link("/lib/x86_64-linux-gnu/libz.so.1", "libz.so.1.2.13")
	mk("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", 0o755)
	link("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	mk("/usr/share/seabios/bios-256k.bin", 0o644)

	list, err := ParseQEMUFiles(strings.NewReader(`# comment
launcher qemu-system-x86 /usr/bin/qemu-system-x86_64
launcher zlib1g /lib/x86_64-linux-gnu/libz.so.1
launcher libc6 /lib64/ld-linux-x86-64.so.2
launcher seabios /usr/share/seabios/bios-256k.bin
vmlet zlib1g /usr/lib/x86_64-linux-gnu/libz.so.1
`))
	if err != nil {
		t.Fatal(err)
	}
	var spec Spec
	if err := fromRoot(&spec, root, list, ListLauncher); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range spec.Files {
		got = append(got, fmt.Sprintf("file %s %o %s", f.Path, f.Mode, strings.TrimPrefix(f.Source, root)))
	}
	for _, l := range spec.Symlinks {
		got = append(got, fmt.Sprintf("link %s -> %s", l.Path, l.Target))
	}
	sort.Strings(got)
	want := []string{
		"file /usr/bin/qemu-system-x86_64 755 /usr/bin/qemu-system-x86_64",
		"file /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 755 /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
		"file /usr/lib/x86_64-linux-gnu/libz.so.1.2.13 644 /lib/x86_64-linux-gnu/libz.so.1.2.13",
		"file /usr/share/seabios/bios-256k.bin 644 /usr/share/seabios/bios-256k.bin",
		"link /usr/lib/x86_64-linux-gnu/libz.so.1 -> /usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
		"link /usr/lib64/ld-linux-x86-64.so.2 -> /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("launcher files:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The vmlet line names the /usr alias of a file shipped under /lib: found all the same.
	var vm Spec
	if err := fromRoot(&vm, root, list, ListVmlet); err != nil {
		t.Fatal(err)
	}
	if len(vm.Symlinks) != 1 || len(vm.Files) != 1 {
		t.Errorf("vmlet files %+v, symlinks %+v; want libz's link and file", vm.Files, vm.Symlinks)
	}
	// With merged-/usr links and folders from base(), the plan holds together.
	full := base()
	full.Files = append(full.Files, spec.Files...)
	full.Symlinks = append(full.Symlinks, spec.Symlinks...)
	if _, err := Plan(full); err != nil {
		t.Errorf("plan of base + launcher files: %v", err)
	}
	// A listed file no package holds is an error naming the fix.
	missing, _ := ParseQEMUFiles(strings.NewReader("launcher x /usr/lib/gone.so\n"))
	if err := fromRoot(&Spec{}, root, missing, ListLauncher); err == nil || !strings.Contains(err.Error(), "-update") {
		t.Errorf("fromRoot with a missing file: %v, want an error naming TestQEMUFiles -update", err)
	}
}

func TestParseQEMUFilesRejects(t *testing.T) {
	for _, bad := range []string{"launcher pkg", "other pkg /x", "vmlet pkg relative/x", "vmlet pkg /a/../b", "launcher a b /c"} {
		if _, err := ParseQEMUFiles(strings.NewReader(bad + "\n")); err == nil {
			t.Errorf("ParseQEMUFiles(%q) = nil error", bad)
		}
	}
}
