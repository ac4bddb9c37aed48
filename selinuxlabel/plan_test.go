package selinuxlabel

import (
	"errors"
	"reflect"
	"testing"
)

// TestPlan: the VM's own files and its host files get the file type at the launcher's level,
// shared content the shared type at s0 (several VMs read it); a kernel hard link named both
// private and shared stays shared; bad paths and levels are refused.
func TestPlan(t *testing.T) {
	l := LauncherContext("", "s0:c12,c345")
	const vm, run = "/var/lib/vmlet/volumes/uid1", "/run/vmlet/uid1"
	files := Files{
		Private: []string{vm, vm + "/disks", vm + "/disks/root.qcow2", vm + "/disks/scratch.qcow2", vm + "/disks/ci.iso",
			vm + "/boot/kernel", run, run + "/launcher.sock"},
		Shared: []string{"/var/lib/vmlet/images/blobs/sha256/aa", vm + "/boot/kernel"},
		Host:   []string{"/srv/disks/host.img", "/dev/vg0/fast"},
	}
	got, err := Plan(l, files, Options{})
	if err != nil {
		t.Fatal(err)
	}
	own := "system_u:object_r:container_file_t:s0:c12,c345"
	ro := "system_u:object_r:container_ro_file_t:s0"
	want := []Label{
		{"/dev/vg0/fast", Host, own},
		{run, Private, own},
		{run + "/launcher.sock", Private, own},
		{"/srv/disks/host.img", Host, own},
		{"/var/lib/vmlet/images/blobs/sha256/aa", Shared, ro},
		{vm, Private, own},
		{vm + "/boot/kernel", Shared, ro},
		{vm + "/disks", Private, own},
		{vm + "/disks/ci.iso", Private, own},
		{vm + "/disks/root.qcow2", Private, own},
		{vm + "/disks/scratch.qcow2", Private, own},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plan:\n got %v\nwant %v", got, want)
	}
	custom, err := Plan(Context{"system_u", "system_r", KubeVirtProcessType, "s0:c1,c2"}, Files{Private: []string{vm}, Shared: []string{"/img"}},
		Options{FileType: "virt_content_t", SharedType: "virt_ro_t"})
	if err != nil {
		t.Fatal(err)
	}
	if w := []Label{{"/img", Shared, "system_u:object_r:virt_ro_t:s0"}, {vm, Private, "system_u:object_r:virt_content_t:s0:c1,c2"}}; !reflect.DeepEqual(custom, w) {
		t.Errorf("custom types: %v, want %v", custom, w)
	}
	for _, bad := range []struct {
		c Context
		f Files
	}{
		{LauncherContext("", "s0-s0:c0.c1023"), files}, // a clearance, not a level
		{LauncherContext("", "s1:c1,c2"), files},
		{l, Files{Private: []string{"relative"}}},
		{l, Files{Host: []string{"/a/../b"}}},
	} {
		if _, err := Plan(bad.c, bad.f, Options{}); err == nil {
			t.Errorf("Plan(%v, %v) accepted", bad.c, bad.f)
		}
	}
}

// TestTeardown: only host files are restored (to their previous label, or unlabelled when they
// had none); private files go with their folders and shared content stays.
func TestTeardown(t *testing.T) {
	j := []Entry{
		{Label: Label{"/vm/disks/a.qcow2", Private, "x"}},
		{Label: Label{"/img/blob", Shared, "y"}, Previous: "system_u:object_r:var_lib_t:s0", Had: true},
		{Label: Label{"/srv/host.img", Host, "x"}, Previous: "system_u:object_r:default_t:s0", Had: true},
		{Label: Label{"/srv/new.img", Host, "x"}},
	}
	want := []Restore{{Path: "/srv/host.img", Context: "system_u:object_r:default_t:s0"}, {Path: "/srv/new.img", Remove: true}}
	if got := Teardown(j); !reflect.DeepEqual(got, want) {
		t.Errorf("teardown %v, want %v", got, want)
	}
}

func TestParseContext(t *testing.T) {
	for in, want := range map[string]Context{
		"system_u:system_r:container_t:s0:c1,c2\x00":                {"system_u", "system_r", "container_t", "s0:c1,c2"},
		"system_u:system_r:virt_launcher.process:s0\n":              {"system_u", "system_r", "virt_launcher.process", "s0"},
		"unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023\x00": {"unconfined_u", "unconfined_r", "unconfined_t", "s0-s0:c0.c1023"},
	} {
		got, err := ParseContext(in)
		if err != nil || got != want {
			t.Errorf("ParseContext(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got.String()+"\x00" != in && got.String()+"\n" != in {
			t.Errorf("String() = %q, from %q", got.String(), in)
		}
	}
	for _, bad := range []string{"", "unconfined_t", "u:r:t", "u:r:t:x0", "u:r:t:s0:x1", "::t:s0"} {
		if _, err := ParseContext(bad); !errors.Is(err, ErrBadContext) {
			t.Errorf("ParseContext(%q): %v, want ErrBadContext", bad, err)
		}
	}
	// What Plan labels at: a VM's level, never a process's range or unordered categories.
	for _, bad := range []string{"s0:c2,c1", "s0:c1024", "s0-s0:c0.c1023", "s0:c1.c3", "s1"} {
		if err := CheckLevel(bad); !errors.Is(err, ErrBadContext) {
			t.Errorf("CheckLevel(%q): %v, want ErrBadContext", bad, err)
		}
	}
}

// TestLevelFor: a stable level per seed with two distinct categories, another seed (a
// migration target that does not keep its source's level) another level, and a taken level
// skipped.
func TestLevelFor(t *testing.T) {
	a := LevelFor("uid-1", nil)
	if err := CheckLevel(a); err != nil || a == "s0" {
		t.Fatalf("LevelFor = %q (%v)", a, err)
	}
	if again := LevelFor("uid-1", nil); again != a {
		t.Errorf("LevelFor is not stable: %q then %q", a, again)
	}
	if b := LevelFor("uid-1/migration-1", nil); b == a {
		t.Errorf("another seed gave the same level %q", a)
	}
	if c := LevelFor("uid-1", map[string]bool{a: true}); c == a || CheckLevel(c) != nil {
		t.Errorf("taken level %q given again (%q)", a, c)
	}
}

func TestPolicyTypeOf(t *testing.T) {
	cfg := "# This file controls the state of SELinux\nSELINUX=enforcing\n SELINUXTYPE = \"mls\" \n"
	if got := PolicyTypeOf(cfg); got != "mls" {
		t.Errorf("PolicyTypeOf = %q, want mls", got)
	}
	if got := PolicyTypeOf("SELINUX=disabled\n"); got != "" {
		t.Errorf("PolicyTypeOf without SELINUXTYPE = %q", got)
	}
}
