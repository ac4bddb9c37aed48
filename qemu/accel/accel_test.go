package accel

import (
	"errors"
	"testing"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		f    Facts
		want Kind
	}{
		{"real kvm", Facts{CPUVirtFlag: true, KVMAPIVersion: 12}, KVM},
		{"nested pvm", Facts{CPUVirtFlag: true, PVMModule: true, KVMAPIVersion: 12}, TCG},
		{"no cpu flag", Facts{KVMAPIVersion: 12}, TCG},
		{"no dev", Facts{CPUVirtFlag: true, DevKVMErr: errors.New("enoent")}, TCG},
		{"odd api", Facts{CPUVirtFlag: true, KVMAPIVersion: 11}, TCG},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.f)
			if d.Accel != tt.want || d.Reason == "" {
				t.Fatalf("Decide(%+v) = %+v, want %s with a reason", tt.f, d, tt.want)
			}
		})
	}
}

func TestCPUInfo(t *testing.T) {
	if !cpuinfoHasVirt([]byte("processor\t: 0\nflags\t\t: fpu vme vmx sse\n")) {
		t.Fatal("vmx not found")
	}
	if cpuinfoHasVirt([]byte("flags\t\t: fpu vme sse\nvmx\n")) {
		t.Fatal("vmx outside flags line counted")
	}
}

// TestProbeThisHost checks the rule against this host's real facts: whatever they are, the
// decision must be consistent with them.
func TestProbeThisHost(t *testing.T) {
	f := ReadFacts()
	d := Decide(f)
	t.Logf("facts %+v -> %s (%s)", f, d.Accel, d.Reason)
	if f.PVMModule && d.KVMUsable() {
		t.Fatal("KVM chosen on a kvm_pvm host")
	}
}
