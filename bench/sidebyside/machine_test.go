package main

import (
	"slices"
	"testing"
)

func TestArgvExtras(t *testing.T) {
	lv := []string{"qemu", "-name", "guest=a,debug-threads=on", "-S",
		"-object", `{"qom-type":"secret","id":"masterKey0"}`, "-machine", "pc-q35-7.2,usb=off",
		"-device", `{"driver":"pcie-root-port","port":16}`, "-device", `{"driver":"virtio-serial-pci","id":"v"}`,
		"-audiodev", `{"id":"audio1","driver":"none"}`, "-sandbox", "on,obsolete=deny", "-no-shutdown",
		"-chardev", "socket,id=charmonitor,fd=27,server=on,wait=off"}
	ours := []string{"qemu", "-S", "-nodefaults", "-name", "guest=a", "-machine", "q35",
		"-chardev", "socket,id=qmp_mon,fd=3", "-device", "pcie-root-port,id=rp_1", "-device", "virtio-serial-pci,id=vser_0"}
	got := ArgvExtras(lv, ours)
	want := []string{"-object secret", "-audiodev none", "-sandbox", "-no-shutdown"}
	if !slices.Equal(got, want) {
		t.Errorf("ArgvExtras = %q, want %q", got, want)
	}
	if got := joinOptions([]string{"qemu", "-S", "-m", "256", "-name", "x"}); !slices.Equal(got, []string{"-S", "-m 256", "-name x"}) {
		t.Errorf("joinOptions = %q", got)
	}
}
