package imagebuild

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	spec := Spec{
		Files: []File{
			{Source: "/host/qemu", Path: "/usr/bin/qemu-system-x86_64", Mode: 0o755},
			{Source: "/host/bios", Path: "/usr/share/seabios/bios-256k.bin"},
			{Path: "/etc/passwd", Content: []byte("root:x:0:0::/:/sbin/nologin\n")},
		},
		Symlinks: []Symlink{{Path: "/lib", Target: "usr/lib"}},
		Dirs:     []Dir{{Path: "/tmp", Mode: 0o777}, {Path: "/usr/bin", Mode: 0o700}},
	}
	got, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range got {
		lines = append(lines, fmt.Sprintf("%d %s %o %s%s", e.Type, e.Name, e.Mode, e.Source, e.Target))
	}
	want := []string{
		"0 etc 755 ",
		"1 etc/passwd 644 ",
		"2 lib 777 usr/lib",
		"0 tmp 777 ",
		"0 usr 755 ",
		"0 usr/bin 700 ",
		"1 usr/bin/qemu-system-x86_64 755 /host/qemu",
		"0 usr/share 755 ",
		"0 usr/share/seabios 755 ",
		"1 usr/share/seabios/bios-256k.bin 644 /host/bios",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestPlanRejects(t *testing.T) {
	for name, spec := range map[string]Spec{
		"relative":      {Files: []File{{Source: "/a", Path: "usr/bin/x"}}},
		"unclean":       {Files: []File{{Source: "/a", Path: "/usr/../bin/x"}}},
		"root":          {Dirs: []Dir{{Path: "/"}}},
		"twice":         {Files: []File{{Source: "/a", Path: "/x"}, {Source: "/b", Path: "/x"}}},
		"file and link": {Files: []File{{Source: "/a", Path: "/x"}}, Symlinks: []Symlink{{Path: "/x", Target: "y"}}},
		"file parent":   {Files: []File{{Source: "/a", Path: "/x"}, {Source: "/b", Path: "/x/y"}}},
		"link parent":   {Symlinks: []Symlink{{Path: "/lib", Target: "usr/lib"}}, Files: []File{{Source: "/b", Path: "/lib/libc.so.6"}}},
		"empty target":  {Symlinks: []Symlink{{Path: "/lib"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Plan(spec)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("Plan = %v, want a *SpecError", err)
			}
		})
	}
}

func TestEpoch(t *testing.T) {
	if e, err := Epoch(""); err != nil || e.Unix() != 0 {
		t.Errorf(`Epoch("") = %v, %v; want the Unix epoch`, e, err)
	}
	if e, err := Epoch("1700000000"); err != nil || e.Unix() != 1700000000 {
		t.Errorf(`Epoch("1700000000") = %v, %v`, e, err)
	}
	for _, bad := range []string{"-1", "1.5", "abc", "99999999999999999999999"} {
		if _, err := Epoch(bad); err == nil {
			t.Errorf("Epoch(%q) = nil error", bad)
		}
	}
}
