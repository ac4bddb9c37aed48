package vmtop

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/testing/protocmp"
)

func f(v float64) *float64 { return &v }

func parse(t *testing.T, text string) Families {
	t.Helper()
	fams, err := Parse(strings.NewReader(text), nil)
	if err != nil {
		t.Fatalf("parse %q: %v", text, err)
	}
	return fams
}

func TestRows(t *testing.T) {
	const (
		typeCPU = "# TYPE kubevirt_vmi_cpu_usage_seconds_total counter\n"
		typeRSS = "# TYPE kubevirt_vmi_memory_resident_bytes gauge\n"
	)
	tests := []struct {
		name          string
		first, second string
		elapsed       time.Duration
		node          string
		want          []Row
	}{{
		name: "rates, gauges from the second scrape, drives and interfaces summed",
		first: typeCPU + `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="default",name="a"} 10
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="default",name="a"} 1000
kubevirt_vmi_memory_domain_bytes{node="n1",namespace="default",name="a"} 4096
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vda"} 1000
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vdb"} 500
kubevirt_vmi_storage_write_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vda"} 0
kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="default",name="a",interface="default"} 100
kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="default",name="a",interface="net2"} 0
kubevirt_vmi_network_transmit_bytes_total{node="n1",namespace="default",name="a",interface="default"} 7
`,
		second: typeCPU + `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="default",name="a"} 11
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="default",name="a"} 2000
kubevirt_vmi_memory_domain_bytes{node="n1",namespace="default",name="a"} 4096
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vda"} 3000
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vdb"} 1500
kubevirt_vmi_storage_write_traffic_bytes_total{node="n1",namespace="default",name="a",drive="vda"} 4096
kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="default",name="a",interface="default"} 300
kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="default",name="a",interface="net2"} 200
kubevirt_vmi_network_transmit_bytes_total{node="n1",namespace="default",name="a",interface="default"} 7
`,
		elapsed: 2 * time.Second,
		want: []Row{{
			VMI: VMI{"default", "a", "n1"}, CPUCores: f(0.5), MemoryResidentBytes: f(2000), MemoryDomainBytes: f(4096),
			DiskReadBytesPerSecond: f(1500), DiskWriteBytesPerSecond: f(2048), NetRxBytesPerSecond: f(200), NetTxBytesPerSecond: f(0),
		}},
	}, {
		name: "counter resets count from zero, per series: never negative",
		first: `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="a"} 100
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vda"} 9000
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vdb"} 100
kubevirt_vmi_network_transmit_bytes_total{node="n1",namespace="ns",name="a",interface="default"} 5000
`,
		second: `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="a"} 3
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vda"} 400
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vdb"} 900
kubevirt_vmi_network_transmit_bytes_total{node="n1",namespace="ns",name="a",interface="default"} 0
`,
		elapsed: 2 * time.Second,
		want: []Row{{
			VMI: VMI{"ns", "a", "n1"}, CPUCores: f(1.5),
			DiskReadBytesPerSecond: f(200 + 400), // vda reset: 400 from zero; vdb: +800
			NetTxBytesPerSecond:    f(0),
		}},
	}, {
		name: "missing series are unknown, not zero",
		first: typeCPU + `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="cpu-only"} 1
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="ns",name="no-cpu-before"} 64
`,
		second: typeCPU + typeRSS + `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="cpu-only"} 2
kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="no-cpu-before"} 2
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="ns",name="no-cpu-before"} 128
kubevirt_vmi_storage_write_traffic_bytes_total{node="n1",namespace="ns",name="no-cpu-before",drive="vda"} 10
`,
		elapsed: time.Second,
		want: []Row{
			{VMI: VMI{"ns", "cpu-only", "n1"}, CPUCores: f(1)},
			{VMI: VMI{"ns", "no-cpu-before", "n1"}, MemoryResidentBytes: f(128)},
		},
	}, {
		name: "a drive hot-plugged between the scrapes adds nothing; the drive there twice counts",
		first: `kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vda"} 10
`,
		second: `kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="vda"} 30
kubevirt_vmi_storage_read_traffic_bytes_total{node="n1",namespace="ns",name="a",drive="hotplug"} 999999
`,
		elapsed: 4 * time.Second,
		want:    []Row{{VMI: VMI{"ns", "a", "n1"}, DiskReadBytesPerSecond: f(5)}},
	}, {
		name: "VMIs on several nodes (one of them on two, mid-migration), sorted",
		first: `kubevirt_vmi_cpu_usage_seconds_total{node="n2",namespace="prod",name="db"} 10
kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="prod",name="db"} 50
kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="dev",name="db"} 0
kubevirt_vmi_cpu_usage_seconds_total{node="n3",namespace="dev",name="api"} 0
`,
		second: `kubevirt_vmi_cpu_usage_seconds_total{node="n2",namespace="prod",name="db"} 11
kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="prod",name="db"} 52
kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="dev",name="db"} 0.5
kubevirt_vmi_cpu_usage_seconds_total{node="n3",namespace="dev",name="api"} 0.25
`,
		elapsed: time.Second,
		want: []Row{
			{VMI: VMI{"dev", "api", "n3"}, CPUCores: f(0.25)},
			{VMI: VMI{"dev", "db", "n1"}, CPUCores: f(0.5)},
			{VMI: VMI{"prod", "db", "n1"}, CPUCores: f(2)},
			{VMI: VMI{"prod", "db", "n2"}, CPUCores: f(1)},
		},
	}, {
		name: "a VMI only in the second scrape has no rates; one only in the first is gone",
		first: `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="stopped"} 10
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="ns",name="stopped"} 10
`,
		second: typeRSS + `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="started"} 1
kubevirt_vmi_memory_resident_bytes{node="n1",namespace="ns",name="started"} 256
kubevirt_vmi_network_receive_bytes_total{node="n1",namespace="ns",name="started",interface="default"} 64
`,
		elapsed: time.Second,
		want:    []Row{{VMI: VMI{"ns", "started", "n1"}, MemoryResidentBytes: f(256)}},
	}, {
		name:    "no time between the scrapes: gauges only",
		first:   `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="a"} 1` + "\n",
		second:  `kubevirt_vmi_cpu_usage_seconds_total{node="n1",namespace="ns",name="a"} 2` + "\n" + `kubevirt_vmi_memory_domain_bytes{node="n1",namespace="ns",name="a"} 8` + "\n",
		elapsed: 0,
		want:    []Row{{VMI: VMI{"ns", "a", "n1"}, MemoryDomainBytes: f(8)}},
	}, {
		name: "series without a node label take the endpoint's node; series without a VMI are ignored",
		first: `kubevirt_vmi_cpu_usage_seconds_total{namespace="ns",name="a"} 1
kubevirt_vmi_cpu_usage_seconds_total 5
kubevirt_vmi_cpu_usage_seconds_total{namespace="ns"} 5
`,
		second: `kubevirt_vmi_cpu_usage_seconds_total{namespace="ns",name="a"} 3
kubevirt_vmi_cpu_usage_seconds_total 9
kubevirt_vmi_cpu_usage_seconds_total{namespace="ns"} 9
`,
		elapsed: time.Second,
		node:    "endpoint-node",
		want:    []Row{{VMI: VMI{"ns", "a", "endpoint-node"}, CPUCores: f(2)}},
	}, {
		name:    "other metrics are ignored",
		first:   "process_cpu_seconds_total 1\nkubevirt_vmi_vcpu_seconds_total{namespace=\"ns\",name=\"a\",id=\"0\"} 1\n",
		second:  "process_cpu_seconds_total 2\nkubevirt_vmi_vcpu_seconds_total{namespace=\"ns\",name=\"a\",id=\"0\"} 2\n",
		elapsed: time.Second,
		want:    []Row{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Rows(Pair{First: parse(t, tt.first), Second: parse(t, tt.second), Elapsed: tt.elapsed, Node: tt.node})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Rows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilter(t *testing.T) {
	rows := []Row{
		{VMI: VMI{"dev", "db", "n1"}},
		{VMI: VMI{"prod", "db", "n1"}},
		{VMI: VMI{"prod", "db", "n2"}},
		{VMI: VMI{"prod", "web", "n2"}},
	}
	tests := []struct {
		namespace, name string
		want            []Row
	}{
		{"", "", rows},
		{"prod", "", rows[1:]},
		{"prod", "db", rows[1:3]},
		{"", "db", rows[:3]},
		{"dev", "web", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, Filter(rows, tt.namespace, tt.name)); diff != "" {
			t.Errorf("Filter(%q, %q) (-want +got):\n%s", tt.namespace, tt.name, diff)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{FormatPercent(nil), "-"},
		{FormatPercent(f(0)), "0.0%"},
		{FormatPercent(f(0.125)), "12.5%"},
		{FormatPercent(f(2)), "200.0%"},
		{FormatBytes(nil), "-"},
		{FormatBytes(f(0)), "0B"},
		{FormatBytes(f(1023)), "1023B"},
		{FormatBytes(f(1023.6)), "1.0KiB"},
		{FormatBytes(f(1536)), "1.5KiB"},
		{FormatBytes(f(1024*1024 - 1)), "1.0MiB"},
		{FormatBytes(f(235 * 1024 * 1024)), "235.0MiB"},
		{FormatBytes(f(3 << 30)), "3.0GiB"},
		{FormatBytes(f(1 << 62)), "4.0EiB"},
		{FormatRate(nil), "-"},
		{FormatRate(f(2048)), "2.0KiB/s"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestParseFormats(t *testing.T) {
	const text = `# TYPE kubevirt_vmi_cpu_usage_seconds_total counter
kubevirt_vmi_cpu_usage_seconds_total{name="a",namespace="ns",node="n1"} 1.5
`
	want := parse(t, text)
	// The same families as delimited protobuf (what AcceptHeader prefers) parse the same.
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, mf := range want {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	h := http.Header{"Content-Type": {string(expfmt.NewFormat(expfmt.TypeProtoDelim))}}
	got, err := Parse(&buf, h)
	if err != nil {
		t.Fatalf("parse protobuf: %v", err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("protobuf vs text (-text +protobuf):\n%s", diff)
	}
	h = http.Header{"Content-Type": {"text/plain; version=0.0.4"}}
	if _, err := Parse(strings.NewReader("kubevirt_vmi_cpu_usage_seconds_total{ 1\n"), h); err == nil {
		t.Error("Parse of broken text: no error")
	}
}
