package main

import (
	"math"
	"slices"
)

// Summary describes one series of samples (milliseconds or MiB).
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	P95    float64 `json:"p95"`
}

// Summarize computes the summary of xs; an empty series gives the zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), Median: Percentile(s, 0.5), Min: s[0], Max: s[len(s)-1], P95: Percentile(s, 0.95)}
}

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted by linear interpolation between the
// closest ranks (numpy's default); NaN for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	p = min(max(p, 0), 1)
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// Ratio is how a mode compares with the reference mode (vmlet): Of is the ratio of the medians
// (other / vmlet); Paired summarizes the per-round ratios other[i] / vmlet[i] of samples taken in
// the same round, which cancels drift between rounds.
type Ratio struct {
	Of     float64 `json:"of_medians"`
	Paired Summary `json:"paired"`
}

// Compare returns the ratio of other to ref. Paired ratios use rounds where both have a sample
// and ref's is non-zero; series of different lengths pair up to the shorter one.
func Compare(other, ref []float64) Ratio {
	var r Ratio
	if m := Summarize(ref).Median; m != 0 {
		r.Of = Summarize(other).Median / m
	}
	var pairs []float64
	for i := range min(len(other), len(ref)) {
		if ref[i] != 0 {
			pairs = append(pairs, other[i]/ref[i])
		}
	}
	r.Paired = Summarize(pairs)
	return r
}

// RoundOrder returns the order in which the n modes run in round r: rotated by r, so every
// mode runs first, second, ... equally often (A B, B A, A B ... for two).
func RoundOrder(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = (i + r) % n
	}
	return order
}
