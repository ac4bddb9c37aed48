package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	r := &Results{
		Date: "2026-11-29T10:00:00Z", Rounds: 2,
		Machine:  Machine{Cores: 2, CPUModel: "Xeon", QEMU: "QEMU 7.2", Libvirt: "libvirt 9.0.0"},
		Commands: []string{"make bench"},
		Comparisons: []Comparison{newComparison("start-running", "Start", "ms", "round", "how",
			[]string{modeVmlet, modeLibvirt}, map[string][]float64{modeVmlet: {60, 70}, modeLibvirt: {400, 500}})},
		LibvirtExtras: []string{"-sandbox"},
		Notes:         []string{"a note"},
	}
	var buf bytes.Buffer
	Render(&buf, r)
	out := buf.String()
	for _, want := range []string{
		"| vmlet | 65.0 | 60.0 | 70.0 |",
		"| libvirt | 450 | 400 | 500 |",
		"**6.92×**",           // 450 / 65
		"6.90× [6.67 – 7.14]", // per round: 400/60, 500/70
		"- libvirt: 400 500",  // raw samples
		"`-sandbox`", "- a note", "`make bench`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
}
