package main

import (
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	def, small := Config{Mode: "qemu"}, Config{Mode: "qemu", TBSizeMiB: 32}
	res := Results{Started: "2026-12-01T11:20:04Z", Host: "h", MemoryMiB: 512, VCPUs: 1, Rounds: 3, Configs: []Config{def, small}}
	for r, s := range []float64{60, 50, 55} {
		res.Boots = append(res.Boots,
			Boot{Config: def, Round: r + 1, Seconds: s, CPUSeconds: s - 5, RSSMiB: 1100, PeakRSSMiB: 1101, Load1Before: float64(r)},
			Boot{Config: small, Round: r + 1, Seconds: s + 10, CPUSeconds: s, RSSMiB: 480, PeakRSSMiB: 481 + float64(r), Load1Before: 2.5})
	}
	got := render(res)
	for _, want := range []string{
		"| qemu tb-size=default | 55.0 s (50.0–60.0) | 50.0 s (45.0–55.0) | 1100 MiB | 1101 MiB | 60.0 / 55.0 (0.0), 50.0 / 45.0 (1.0), 55.0 / 50.0 (2.0) |",
		"| qemu tb-size=32 | 65.0 s (60.0–70.0) | 55.0 s (50.0–60.0) | 480 MiB | 482 MiB | 70.0 / 60.0 (2.5), 60.0 / 50.0 (2.5), 65.0 / 55.0 (2.5) |",
		"guest 512 MiB, 1 vCPU; 3 rounds",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
}

func TestParseSizes(t *testing.T) {
	if got, err := parseSizes("0, 16,,256"); err != nil || len(got) != 3 || got[0] != 0 || got[2] != 256 {
		t.Errorf("parseSizes = %v, %v", got, err)
	}
	if _, err := parseSizes("16,x"); err == nil {
		t.Error("parseSizes accepted x")
	}
}
