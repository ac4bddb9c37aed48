package nodeagent_test

import (
	"testing"

	"github.com/vmlet/vmlet/nodeagent"
)

func TestCPUModelName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: other\n",
			"AMD EPYC 7B13 64-Core Processor"},
		{"processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n", ""}, // arm64 names no model
		{"", ""},
	} {
		if got := nodeagent.CPUModelName([]byte(tt.in)); got != tt.want {
			t.Errorf("CPUModelName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
