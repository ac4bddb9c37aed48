package main

import (
	"fmt"
	"sort"
	"strings"
)

// render is res as Markdown: one row per config (medians, min–max, every boot with the load
// average before it), in the order of res.Configs.
func render(res Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run %s on %s; guest %d MiB, %d vCPU; %d rounds, one guest at a time, order rotated per round.\n\n",
		res.Started, res.Host, res.MemoryMiB, res.VCPUs, res.Rounds)
	b.WriteString("| config | boot → login prompt, median (min–max) | QEMU CPU time to prompt, median (min–max) | QEMU RSS at prompt, median | QEMU peak RSS (VmHWM), median | each round: boot s / CPU s (1-min load before) |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, c := range res.Configs {
		var secs, cpu, rss, peak []float64
		var rounds []string
		for _, bt := range res.Boots {
			if bt.Config != c {
				continue
			}
			if bt.Err != "" {
				rounds = append(rounds, fmt.Sprintf("failed (%.1f)", bt.Load1Before))
				continue
			}
			secs, cpu = append(secs, bt.Seconds), append(cpu, bt.CPUSeconds)
			rss, peak = append(rss, bt.RSSMiB), append(peak, bt.PeakRSSMiB)
			rounds = append(rounds, fmt.Sprintf("%.1f / %.1f (%.1f)", bt.Seconds, bt.CPUSeconds, bt.Load1Before))
		}
		if len(secs) == 0 {
			if len(rounds) > 0 {
				fmt.Fprintf(&b, "| %s | every boot failed | | | | %s |\n", c.Label(), strings.Join(rounds, ", "))
			}
			continue
		}
		fmt.Fprintf(&b, "| %s | %.1f s (%.1f–%.1f) | %.1f s (%.1f–%.1f) | %.0f MiB | %.0f MiB | %s |\n",
			c.Label(), median(secs), minOf(secs), maxOf(secs), median(cpu), minOf(cpu), maxOf(cpu), median(rss), median(peak), strings.Join(rounds, ", "))
	}
	return b.String()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	return m
}
