package main

import (
	"math"
	"slices"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{5}, Summary{N: 1, Median: 5, Min: 5, Max: 5, P95: 5}},
		{[]float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, Min: 1, Max: 4, P95: 3.85}},
		{[]float64{10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, Summary{N: 11, Median: 6, Min: 1, Max: 100, P95: 55}},
	} {
		got := Summarize(tc.in)
		if got.N != tc.want.N || !near(got.Median, tc.want.Median) || !near(got.Min, tc.want.Min) ||
			!near(got.Max, tc.want.Max) || !near(got.P95, tc.want.P95) {
			t.Errorf("Summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestSummarizeKeepsInput(t *testing.T) {
	in := []float64{3, 1, 2}
	Summarize(in)
	if !slices.Equal(in, []float64{3, 1, 2}) {
		t.Errorf("Summarize sorted its input: %v", in)
	}
}

func TestPercentile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5}
	for p, want := range map[float64]float64{0: 1, 0.25: 2, 0.5: 3, 0.9: 4.6, 1: 5, -1: 1, 2: 5} {
		if got := Percentile(s, p); !near(got, want) {
			t.Errorf("Percentile(%v) = %v, want %v", p, got, want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("Percentile of nothing is not NaN")
	}
}

func TestCompare(t *testing.T) {
	ref := []float64{10, 20, 0, 40}
	other := []float64{20, 30, 5, 80, 99}
	r := Compare(other, ref)
	// medians: other 30 (of 5), ref 15 → 2; pairs 2, 1.5, 2 (the zero ref round is left out)
	if !near(r.Of, 2) {
		t.Errorf("ratio of medians = %v, want 2", r.Of)
	}
	if r.Paired.N != 3 || !near(r.Paired.Median, 2) || !near(r.Paired.Min, 1.5) || !near(r.Paired.Max, 2) {
		t.Errorf("paired = %+v", r.Paired)
	}
	if z := Compare([]float64{1}, []float64{0}); z.Of != 0 || z.Paired.N != 0 {
		t.Errorf("Compare against zeros = %+v, want zero", z)
	}
}

func TestRoundOrder(t *testing.T) {
	counts := make([][3]int, 3) // counts[mode][position]
	for r := range 6 {
		for pos, m := range RoundOrder(3, r) {
			counts[m][pos]++
		}
	}
	for m, c := range counts {
		if c != [3]int{2, 2, 2} {
			t.Errorf("mode %d positions %v, want each twice", m, c)
		}
	}
	if got := RoundOrder(2, 1); !slices.Equal(got, []int{1, 0}) {
		t.Errorf("RoundOrder(2, 1) = %v", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
