package main

import (
	"strings"
	"testing"

	"github.com/vmlet/vmlet/test/prereq"
)

func runReport(t *testing.T, ci, short bool, in string) (string, int) {
	t.Helper()
	var out strings.Builder
	r := &report{out: &out, output: map[key]*strings.Builder{}, allowedSkipMatch: "KVM not usable", ci: ci,
		short: short, shortNeeds: map[string]int{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	code := r.finish(0)
	return out.String(), code
}

const (
	pass = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.5}
{"Action":"pass","Package":"p","Elapsed":0.6}
`
	kvmSkip = `{"Action":"output","Package":"p","Test":"TestK","Output":"    k_test.go:9: KVM not usable: kvm_pvm\n"}
{"Action":"skip","Package":"p","Test":"TestK"}
`
	otherSkip = `{"Action":"output","Package":"p","Test":"TestR","Output":"    r_test.go:9: prerequisite missing: needs root\n"}
{"Action":"skip","Package":"p","Test":"TestR"}
`
	shortSkips = `{"Action":"output","Package":"p","Test":"TestS","Output":"    s_test.go:9: needs root: not run with -short (make unit)\n"}
{"Action":"skip","Package":"p","Test":"TestS"}
{"Action":"output","Package":"p","Test":"TestT","Output":"    t_test.go:9: needs the API server: not run with -short (make unit)\n"}
{"Action":"skip","Package":"p","Test":"TestT"}
`
	fail = `{"Action":"output","Package":"p","Test":"TestF","Output":"    f_test.go:3: boom\n"}
{"Action":"fail","Package":"p","Test":"TestF","Elapsed":1}
{"Action":"fail","Package":"p","Elapsed":1}
`
	figure = `{"Action":"output","Package":"p","Test":"TestA","Output":"figure: fault matrix: 3 faults injected\n"}
`
	buildFail = `{"ImportPath":"q","Action":"build-output","Output":"q/x.go:1:1: undefined: y\n"}
{"ImportPath":"q","Action":"build-fail"}
{"Action":"fail","Package":"q","Elapsed":0}
`
)

func TestReport(t *testing.T) {
	tests := []struct {
		name     string
		ci       bool
		short    bool
		in       string
		wantCode int
		want     []string
	}{
		{"pass", true, false, pass, 0, []string{"PASS p.TestA (0.50s)", "1 passed, 0 failed, 0 skipped"}},
		{"kvm skip allowed in CI", true, false, pass + kvmSkip, 0, []string{"SKIP p.TestK: k_test.go:9: KVM not usable", "1 passed, 0 failed, 1 skipped"}},
		{"other skip fails in CI", true, false, pass + otherSkip, 1, []string{"CI=true forbids", "1 passed, 1 failed, 1 skipped"}},
		{"other skip ok outside CI", false, false, pass + otherSkip, 0, []string{"1 passed, 0 failed, 1 skipped"}},
		{"failure shows output", true, false, pass + fail, 1, []string{"FAIL p.TestF (1.00s)", "f_test.go:3: boom", "1 passed, 1 failed"}},
		{"build failure shows compiler output", true, false, pass + buildFail, 1, []string{"undefined: y", "q (build failed)"}},
		{"figure listed in the summary", true, false, figure + pass, 0, []string{"figures:\n  fault matrix: 3 faults injected\n", "1 passed"}},
		{"nothing ran", true, false, "", 1, []string{"no test ran"}},
		{"-short skips allowed in CI with -short", true, true, pass + shortSkips, 0, []string{"SKIP p.TestS",
			"not run with -short: 2 tests (they need root: 1, the API server: 1)", "1 passed, 0 failed, 2 skipped"}},
		{"-short skips fail in CI without -short", true, false, pass + shortSkips, 1, []string{"CI=true forbids", "p.TestS"}},
		{"-short allows no other skip in CI", true, true, pass + shortSkips + otherSkip, 1, []string{"CI=true forbids", "p.TestR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runReport(t, tt.ci, tt.short, tt.in)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestShortSkipMatchesPrereq: the report recognises exactly the message test/prereq skips with.
func TestShortSkipMatchesPrereq(t *testing.T) {
	if shortSkip != prereq.ShortSkip {
		t.Fatalf("shortSkip %q, prereq.ShortSkip %q", shortSkip, prereq.ShortSkip)
	}
}
