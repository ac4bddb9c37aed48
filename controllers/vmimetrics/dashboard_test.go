package vmimetrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// dashboards are the Grafana dashboards shipped in config/grafana.
const dashboards = "../../config/grafana/*.json"

// promqlWords are PromQL's keywords and aggregation modifiers: identifiers that are no metric.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

var (
	reString    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	reMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	reRange     = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	reLabelVals = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
)

// metricNames are the metric names a PromQL expression selects: identifiers outside strings,
// label matchers, ranges and grouping lists that are not function calls or keywords.
func metricNames(expr string) []string {
	if m := reLabelVals.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	e := reString.ReplaceAllString(expr, `""`)
	e = reMatchers.ReplaceAllString(e, " ")
	e = reRange.ReplaceAllString(e, " ")
	e = reGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range reIdent.FindAllStringIndex(e, -1) {
		w := e[loc[0]:loc[1]]
		rest := e[loc[1]:]
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		prev := byte(' ')
		if loc[0] > 0 {
			prev = e[loc[0]-1]
		}
		if promqlWords[w] || (len(rest) > 0 && rest[0] == '(') || prev == '$' || prev == '.' || (prev >= '0' && prev <= '9') {
			continue // a function, a keyword, a Grafana variable, a number's or duration's unit
		}
		out = append(out, w)
	}
	return out
}

// queries walks a dashboard's JSON for PromQL: panel targets' expr and query variables'.
func queries(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
				*out = append(*out, s)
				continue
			}
			if q, ok := x.(map[string]any); ok && k == "query" {
				if s, ok := q["query"].(string); ok {
					*out = append(*out, s)
				}
				continue
			}
			queries(x, out)
		}
	case []any:
		for _, x := range v {
			queries(x, out)
		}
	}
}

// TestMetricNames: the extraction finds the metrics and nothing else.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`rate(kubevirt_vmi_cpu_usage_seconds_total{node=~"$node", name="a{b}"}[$__rate_interval])`:               {"kubevirt_vmi_cpu_usage_seconds_total"},
		`histogram_quantile(0.9, sum by (le, phase) (rate(vmlet_launcher_rpc_duration_seconds_bucket[5m])))`:     {"vmlet_launcher_rpc_duration_seconds_bucket"},
		`a_bytes{x="1"} / on (name) group_left b_total`:                                                          {"a_bytes", "b_total"},
		`label_values(kubevirt_vmi_info{node=~"$node"}, namespace)`:                                              {"kubevirt_vmi_info"},
		`sum without (id) (rate(kubevirt_vmi_vcpu_seconds_total[1m])) > bool 0 or vector(0) unless up offset 5m`: {"kubevirt_vmi_vcpu_seconds_total", "up"},
	} {
		got := metricNames(expr)
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", expr, got, want)
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: %v, want %v", expr, got, want)
			}
		}
	}
}

// TestDashboardsQueryExportedMetrics: every metric the shipped dashboards query is a series
// this package exports (Families, a histogram's _bucket/_sum/_count included).
func TestDashboardsQueryExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	for _, f := range Families() {
		for _, n := range f.SeriesNames() {
			exported[n] = true
		}
	}
	files, err := filepath.Glob(dashboards)
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboards, err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var qs []string
		queries(d, &qs)
		used := map[string]bool{}
		for _, q := range qs {
			for _, n := range metricNames(q) {
				used[n] = true
				if !exported[n] {
					t.Errorf("%s: query %q uses %s, which the agent does not export", filepath.Base(file), q, n)
				}
			}
		}
		var names []string
		for n := range used {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) < 30 {
			t.Errorf("%s queries only %d metrics: %v", filepath.Base(file), len(names), names)
		}
		t.Logf("%s: %d queries, %d metrics", filepath.Base(file), len(qs), len(names))
	}
}
