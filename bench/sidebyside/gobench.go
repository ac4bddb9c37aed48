package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// ParseGoBench reads `go test -bench` output: every "BenchmarkX-N  iters  v unit  v unit ..."
// line becomes a GoBenchmark (ns/op included); "pkg:" lines set the package. It is pure.
func ParseGoBench(r io.Reader, pkg string) []GoBenchmark {
	var out []GoBenchmark
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "pkg:" {
			pkg = f[1]
			continue
		}
		if len(f) < 2 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := GoBenchmark{Package: pkg, Name: name, N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Metrics[f[i+1]] = v
			}
		}
		out = append(out, b)
	}
	return out
}
