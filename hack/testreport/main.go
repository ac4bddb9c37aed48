package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output / build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

type key struct{ pkg, test string }

// shortSkip is in every skip message that -short causes: test/prereq.ShortSkip (main_test.go
// keeps them equal).
const shortSkip = "not run with -short (make unit)"

// figurePrefix starts an output line a test prints (fmt.Println, not t.Log) for the summary:
// a figure of the run, e.g. "figure: fault matrix: 9 faults injected, ...". Such lines are
// listed under "figures:" whether the test passed or not.
const figurePrefix = "figure: "

type report struct {
	out              io.Writer
	output           map[key]*strings.Builder
	passed, failed   int
	skipped          []string
	failures         []string
	forbiddenSkips   []string
	failedPkgs       []string
	allowedSkipMatch string
	ci               bool
	short            bool           // the run used -short: shortSkip skips are expected
	shortNeeds       map[string]int // what the tests that -short skipped need → how many
	shortSkipped     int
	figures          []string
}

func main() {
	short := flag.Bool("short", false, "the tests ran with go test -short (make unit): the prereq guards' -short skips are expected")
	flag.Parse()
	r := &report{
		short:            *short,
		shortNeeds:       map[string]int{},
		out:              os.Stdout,
		output:           map[key]*strings.Builder{},
		allowedSkipMatch: "KVM not usable",
		ci:               os.Getenv("CI") == "true",
	}
	start := time.Now()
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(2)
	}
	os.Exit(r.finish(time.Since(start)))
}

func (r *report) read(in io.Reader) error {
	br := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var ev event
			if jerr := json.Unmarshal(line, &ev); jerr != nil || ev.Action == "" {
				// Build errors and other non-JSON lines: pass through.
				fmt.Fprint(r.out, string(line))
			} else {
				r.handle(ev)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read go test output: %w", err)
		}
	}
}

func (r *report) buf(k key) *strings.Builder {
	b := r.output[k]
	if b == nil {
		b = &strings.Builder{}
		r.output[k] = b
	}
	return b
}

func (r *report) handle(ev event) {
	k := key{ev.Package, ev.Test}
	switch ev.Action {
	case "build-output":
		fmt.Fprint(r.out, ev.Output)
	case "build-fail":
		r.failedPkgs = append(r.failedPkgs, ev.ImportPath+" (build failed)")
	case "output":
		if f, ok := strings.CutPrefix(ev.Output, figurePrefix); ok {
			r.figures = append(r.figures, strings.TrimSpace(f))
		}
		r.buf(k).WriteString(ev.Output)
	case "pass", "fail", "skip":
		if ev.Test == "" {
			r.packageDone(ev)
			return
		}
		r.testDone(ev)
	}
}

func (r *report) testDone(ev event) {
	k := key{ev.Package, ev.Test}
	name := shortPkg(ev.Package) + "." + ev.Test
	out := r.buf(k).String()
	delete(r.output, k)
	switch ev.Action {
	case "pass":
		r.passed++
		fmt.Fprintf(r.out, "PASS %s (%.2fs)\n", name, ev.Elapsed)
	case "fail":
		r.failed++
		r.failures = append(r.failures, name)
		fmt.Fprintf(r.out, "FAIL %s (%.2fs)\n%s", name, ev.Elapsed, indent(out))
	case "skip":
		reason := skipReason(out)
		fmt.Fprintf(r.out, "SKIP %s: %s\n", name, reason)
		if r.short && strings.Contains(out, shortSkip) {
			r.shortSkipped++
			r.shortNeeds[shortNeed(out)]++
			return
		}
		r.skipped = append(r.skipped, name+": "+reason)
		if r.ci && !strings.Contains(out, r.allowedSkipMatch) {
			r.forbiddenSkips = append(r.forbiddenSkips, name+": "+reason)
		}
	}
}

func (r *report) packageDone(ev event) {
	k := key{ev.Package, ""}
	out := r.buf(k).String()
	delete(r.output, k)
	if ev.Action == "fail" {
		r.failedPkgs = append(r.failedPkgs, ev.Package)
		fmt.Fprintf(r.out, "FAIL package %s (%.1fs)\n%s", ev.Package, ev.Elapsed, indent(out))
		return
	}
	fmt.Fprintf(r.out, "ok   package %s (%.1fs)\n", ev.Package, ev.Elapsed)
}

func (r *report) finish(d time.Duration) int {
	fmt.Fprintf(r.out, "\n==== summary (%s) ====\n", d.Round(time.Second))
	if len(r.skipped) > 0 {
		sort.Strings(r.skipped)
		fmt.Fprintf(r.out, "skipped:\n  %s\n", strings.Join(r.skipped, "\n  "))
	}
	if len(r.figures) > 0 {
		fmt.Fprintf(r.out, "figures:\n  %s\n", strings.Join(r.figures, "\n  "))
	}
	if r.shortSkipped > 0 {
		var needs []string
		for n, c := range r.shortNeeds {
			needs = append(needs, fmt.Sprintf("%s: %d", n, c))
		}
		sort.Strings(needs)
		fmt.Fprintf(r.out, "not run with -short: %d tests (they need %s)\n", r.shortSkipped, strings.Join(needs, ", "))
	}
	code := 0
	if len(r.failures) > 0 || len(r.failedPkgs) > 0 {
		fmt.Fprintf(r.out, "failed tests: %s\nfailed packages: %s\n",
			strings.Join(r.failures, ", "), strings.Join(r.failedPkgs, ", "))
		code = 1
	}
	if len(r.forbiddenSkips) > 0 {
		fmt.Fprintf(r.out, "CI=true forbids these skips (only %q may skip):\n  %s\n",
			r.allowedSkipMatch, strings.Join(r.forbiddenSkips, "\n  "))
		code = 1
	}
	if r.passed == 0 && code == 0 {
		fmt.Fprintln(r.out, "no test ran")
		code = 1
	}
	fmt.Fprintf(r.out, "%d passed, %d failed, %d skipped\n", r.passed, r.failed+len(r.forbiddenSkips), len(r.skipped)+r.shortSkipped)
	return code
}

// shortNeed is what a test skipped by -short needs: X in "needs X: not run with -short ...".
func shortNeed(out string) string {
	i := strings.Index(out, ": "+shortSkip)
	if i < 0 {
		return "(unknown)"
	}
	j := strings.LastIndex(out[:i], "needs ")
	if j < 0 {
		return "(unknown)"
	}
	return out[j+len("needs ") : i]
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/vmlet/vmlet/") }

func skipReason(out string) string {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		return l
	}
	return "(no reason given)"
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}
