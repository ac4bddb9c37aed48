package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func testGuest() Guest {
	return Guest{
		Name:          "sbs-libvirt-1",
		Kernel:        "/tmp/sbs/guest/vmlinuz",
		Initrd:        "/tmp/sbs/guest/initramfs.gz",
		Cmdline:       cmdline(),
		VCPUs:         1,
		MemoryMiB:     256,
		TCGCacheMiB:   32,
		Machine:       "q35",
		ConsoleSocket: "/tmp/sbs/vm/console.sock",
		ConsoleLog:    "/tmp/sbs/vm/serial.log",
		AgentSocket:   "/tmp/sbs/vm/qga.sock",
	}
}

// TestDomainXML compares the libvirt definition with testdata/domain.golden.xml
// (go test ./bench/sidebyside -run DomainXML -update rewrites it).
func TestDomainXML(t *testing.T) {
	got, err := DomainXML(testGuest())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "domain.golden.xml")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("domain xml differs from %s (-update rewrites it):\n%s", golden, got)
	}
}

// TestDomainXMLEscapes: paths with XML metacharacters are escaped, not injected.
func TestDomainXMLEscapes(t *testing.T) {
	g := testGuest()
	g.Cmdline = `console=ttyS0 a="<b>&c"`
	g.TCGCacheMiB = 0
	got, err := DomainXML(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"<b>", `"<b`, "&c"} {
		if contains(got, bad) {
			t.Errorf("unescaped %q in:\n%s", bad, got)
		}
	}
	if contains(got, "tb-cache") {
		t.Errorf("tb-cache without a TCG cache size:\n%s", got)
	}
}

func contains(s, sub string) bool { return len(sub) > 0 && len(s) >= len(sub) && indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestSameDevicesEverywhere: no mode has a memory balloon (libvirt's is switched off, the
// launcher's spec and bare QEMU's have none), so none pays for one the others lack.
func TestSameDevicesEverywhere(t *testing.T) {
	g := testGuest()
	x, err := DomainXML(g)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, `<memballoon model="none"></memballoon>`) {
		t.Errorf("libvirt domain has a memory balloon:\n%s", x)
	}
	if b := g.LauncherSpec().GetBalloon(); b != nil {
		t.Errorf("launcher spec has a balloon %v", b)
	}
	if b := g.QEMUSpec().Balloon; b != nil {
		t.Errorf("bare QEMU spec has a balloon %v", b)
	}
}
