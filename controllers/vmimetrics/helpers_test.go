package vmimetrics

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// sample is one series read back from a const metric: its family, labels and value (a
// histogram's count).
type sample struct {
	name   string
	labels map[string]string
	value  float64
	hist   *dto.Histogram
	kind   Kind
}

func (s sample) key() string {
	keys := make([]string, 0, len(s.labels))
	for k := range s.labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.name + "{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", k, s.labels[k])
	}
	b.WriteString("}")
	return b.String()
}

// read turns metrics into samples keyed by name{labels}; a duplicate series fails the test.
func read(t *testing.T, ms []prometheus.Metric) map[string]sample {
	t.Helper()
	out := map[string]sample{}
	for _, m := range ms {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatalf("write %s: %v", m.Desc(), err)
		}
		s := sample{name: fqName(m.Desc()), labels: map[string]string{}}
		for _, l := range d.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		switch {
		case d.Counter != nil:
			s.value, s.kind = d.GetCounter().GetValue(), Counter
		case d.Gauge != nil:
			s.value, s.kind = d.GetGauge().GetValue(), Gauge
		case d.Histogram != nil:
			s.hist, s.kind = d.GetHistogram(), Histogram
			s.value = float64(s.hist.GetSampleCount())
		}
		if _, dup := out[s.key()]; dup {
			t.Fatalf("duplicate series %s", s.key())
		}
		out[s.key()] = s
	}
	return out
}

// fqName is a descriptor's metric name (Desc keeps it private; its String() shows it).
func fqName(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `fqName: "`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`fqName: "`):]
	return s[:strings.IndexByte(s, '"')]
}

// names is the set of family names among samples.
func names(ss map[string]sample) map[string]bool {
	out := map[string]bool{}
	for _, s := range ss {
		out[s.name] = true
	}
	return out
}
