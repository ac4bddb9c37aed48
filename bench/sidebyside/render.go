package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func renderMain(args []string) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	in := fs.String("in", "bench/results.json", "results written by sidebyside run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	data, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sidebyside: read results: %v\n", err)
		return 1
	}
	var r Results
	if err := json.Unmarshal(data, &r); err != nil {
		fmt.Fprintf(os.Stderr, "sidebyside: decode %s: %v\n", *in, err)
		return 1
	}
	Render(os.Stdout, &r)
	return 0
}

// Render writes r as Markdown: the run, the method, one table per comparison with ratios
// against vmlet, the raw samples, and the two QEMU command lines. It is pure.
func Render(w io.Writer, r *Results) {
	m := r.Machine
	fmt.Fprintf(w, "### Side by side with libvirt (`bench/sidebyside`)\n\n")
	fmt.Fprintf(w, "Run %s, %.0f s, on %d cores (%s), %d GiB, kernel %s, %s, %s, %s; load average at start %s.\n",
		r.Date, r.DurationSec, m.Cores, m.CPUModel, m.MemGiB, m.Kernel, m.QEMU, m.Libvirt, m.Go, m.LoadAvgAtStart)
	fmt.Fprintf(w, "Accelerator: %s.\n\n", m.Accel)
	fmt.Fprintf(w, "Commands: %s.\n\n", backquote(r.Commands))
	g := r.Guest
	fmt.Fprintf(w, "Guest (every mode): %s + %s, cmdline `%s`, %d vCPU, %d MiB (1024 MiB for migration), TCG cache %d MiB, machine %s. "+
		"Each comparison runs its modes interleaved, %d rounds, the order rotated every round; "+
		"ratios are other ÷ vmlet: of the medians, and per round (paired samples taken back to back).\n\n",
		g.Kernel, g.Initrd, g.Cmdline, g.VCPUs, g.MemoryMiB, g.TCGCacheMiB, g.Machine, r.Rounds)
	for _, c := range r.Comparisons {
		fmt.Fprintf(w, "#### %s (%s)\n\n%s\n\n", c.Title, c.Unit, c.Method)
		fmt.Fprintf(w, "| mode | median | min | max | p95 | samples | ÷ %s (medians) | ÷ %s per %s: median [min – max] |\n|---|---|---|---|---|---|---|---|\n",
			c.Reference, c.Reference, c.SampleUnit)
		for _, md := range c.Modes {
			s := md.Summary
			ratio, paired := "—", "—"
			if md.VsRef != nil {
				ratio = fmt.Sprintf("**%.2f×**", md.VsRef.Of)
				p := md.VsRef.Paired
				paired = fmt.Sprintf("%.2f× [%.2f – %.2f]", p.Median, p.Min, p.Max)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s | %s |\n", md.Name, num(s.Median), num(s.Min), num(s.Max), num(s.P95), s.N, ratio, paired)
		}
		fmt.Fprintf(w, "\n<details><summary>raw samples (%s, in order)</summary>\n\n", c.Unit)
		for _, md := range c.Modes {
			fmt.Fprintf(w, "- %s: %s\n", md.Name, joinNums(md.Samples))
		}
		fmt.Fprintf(w, "\n</details>\n\n")
	}
	if len(r.LibvirtExtras) > 0 {
		fmt.Fprintf(w, "#### What libvirt's QEMU command line has that vmlet's has not\n\n%s\n\n", backquote(r.LibvirtExtras))
		fmt.Fprintf(w, "<details><summary>both command lines (QEMU's /proc/PID/cmdline)</summary>\n\nvmlet:\n\n```\n%s\n```\n\nlibvirt:\n\n```\n%s\n```\n\n</details>\n\n",
			strings.Join(r.VmletArgv, "\n"), strings.Join(r.LibvirtArgv, "\n"))
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "Notes:\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		fmt.Fprintln(w)
	}
}

func backquote(xs []string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = "`" + x + "`"
	}
	return strings.Join(out, ", ")
}

// num prints with 3 significant digits at least and no more decimals than useful.
func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func joinNums(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = num(x)
	}
	return strings.Join(out, " ")
}
