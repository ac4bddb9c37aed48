package main

import (
	"strings"
	"testing"
)

func TestParseGoBench(t *testing.T) {
	in := `goos: linux
pkg: github.com/vmlet/vmlet/controllers
BenchmarkCreateToRunning/vmis=20-2        	       1	58833255750 ns/op	         3.300 agent-cpu-ms/s	      4981 create-to-running-p50-ms	41938944 B/op	  381207 allocs/op
BenchmarkStorageReApply-2                 	       1	  25406886 ns/op
--- FAIL: BenchmarkX
ok  	github.com/vmlet/vmlet/controllers	100.1s
`
	got := ParseGoBench(strings.NewReader(in), "")
	if len(got) != 2 {
		t.Fatalf("got %d benchmarks: %+v", len(got), got)
	}
	b := got[0]
	if b.Package != "github.com/vmlet/vmlet/controllers" || b.Name != "BenchmarkCreateToRunning/vmis=20" || b.N != 1 ||
		b.Metrics["create-to-running-p50-ms"] != 4981 || b.Metrics["agent-cpu-ms/s"] != 3.3 || b.Metrics["ns/op"] != 58833255750 {
		t.Errorf("first = %+v", b)
	}
	if got[1].Name != "BenchmarkStorageReApply" || got[1].Metrics["ns/op"] != 25406886 {
		t.Errorf("second = %+v", got[1])
	}
}
