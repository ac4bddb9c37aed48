package devices

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the compiler's output")

// TestCompileGolden compares instruction listings with testdata/<name>.golden (go test
// ./devices -run TestCompileGolden -update rewrites them; review the diff).
func TestCompileGolden(t *testing.T) {
	tests := []struct {
		name  string
		rules []Rule
		opts  CompileOptions
	}{
		{"empty", nil, CompileOptions{}},
		{"empty_grants", nil, CompileOptions{Grants: true}},
		{"baseline_grants", Baseline(BaselineOptions{KVM: true, Disks: []Disk{{Major: 7, Minor: 0}, {Major: 253, Minor: 1, ReadOnly: true}}}), CompileOptions{Grants: true}},
		{"runc_defaults", RuncDefaultRules(), CompileOptions{}},
		{"deny_and_all", []Rule{Allow(AllDevices, Wildcard, Wildcard, All), Deny(CharDevice, MiscMajor, KVMMinor, ReadWrite), Deny(AllDevices, Wildcard, 0, Mknod)}, CompileOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			insns, err := Compile(tt.rules, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(insns)
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("listing differs from %s (rerun with -update and review the diff):\n%s", path, got)
			}
		})
	}
}

// TestCompileMatchesEvaluate runs many random rule sets and requests through the emitted
// bytecode (interp) and Evaluate. Deterministic seed; FuzzCompile explores further.
func TestCompileMatchesEvaluate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		static, grants, reqs := randomCase(rng)
		checkCase(t, static, grants, reqs)
	}
}

// Numbers drawn from a small set so rules and requests often meet, plus the extremes.
var (
	majors = []int64{Wildcard, 0, 1, 5, 7, 10, 136, MaxMajor}
	minors = []int64{Wildcard, 0, 1, 3, 200, 232, MaxMinor}
	types  = []DeviceType{BlockDevice, CharDevice, AllDevices}
)

func randomRule(rng *rand.Rand) Rule {
	return Rule{
		Type:   types[rng.IntN(len(types))],
		Major:  majors[rng.IntN(len(majors))],
		Minor:  minors[rng.IntN(len(minors))],
		Access: Access(1 + rng.IntN(7)),
		Allow:  rng.IntN(4) != 0,
	}
}

func randomRequest(rng *rand.Rand) Request {
	num := func(set []int64) uint32 {
		if n := set[rng.IntN(len(set))]; n != Wildcard {
			return uint32(n)
		}
		return uint32(rng.IntN(MaxMinor + 1))
	}
	return Request{Type: types[rng.IntN(2)], Major: num(majors), Minor: num(minors), Access: Access(rng.IntN(8))}
}

func randomCase(rng *rand.Rand) (static, grants []Rule, reqs []Request) {
	for range rng.IntN(8) {
		static = append(static, randomRule(rng))
	}
	for range rng.IntN(5) {
		g := randomRule(rng)
		g.Allow = true
		grants = append(grants, g)
	}
	for range 8 {
		reqs = append(reqs, randomRequest(rng))
	}
	return static, grants, reqs
}

func checkCase(t testing.TB, static, grants []Rule, reqs []Request) {
	t.Helper()
	all := append(append([]Rule(nil), static...), grants...)
	in, err := program(static, grants)
	if err != nil {
		t.Fatalf("static %v grants %v: %v", static, grants, err)
	}
	for _, req := range reqs {
		want := Evaluate(all, req)
		got, err := in.decide(req)
		if err != nil {
			t.Fatalf("static %v grants %v request %+v: %v", static, grants, req, err)
		}
		if got != want {
			t.Fatalf("static %v grants %v request %+v: program %v, Evaluate %v", static, grants, req, got, want)
		}
	}
}
