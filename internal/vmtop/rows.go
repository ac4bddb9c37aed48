package vmtop

import (
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// VMI names one VMI on one node (a VMI being migrated can be on two).
type VMI struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
}

// Row is one VMI's figures. A nil figure is unknown: its series were missing (from the second
// scrape for memory, from either scrape for the rates).
type Row struct {
	VMI
	// CPUCores is the rate of kubevirt_vmi_cpu_usage_seconds_total: CPUs kept busy (vCPUs and
	// QEMU's own threads), 1 = one CPU all the time; vmctl prints it ×100 as CPU(%).
	CPUCores *float64 `json:"cpuCores"`
	// MemoryResidentBytes is the QEMU process' resident set; MemoryDomainBytes the memory
	// given to the guest.
	MemoryResidentBytes *float64 `json:"memoryResidentBytes"`
	MemoryDomainBytes   *float64 `json:"memoryDomainBytes"`
	// Disk and network rates in bytes per second, summed over drives and interfaces.
	DiskReadBytesPerSecond  *float64 `json:"diskReadBytesPerSecond"`
	DiskWriteBytesPerSecond *float64 `json:"diskWriteBytesPerSecond"`
	NetRxBytesPerSecond     *float64 `json:"networkReceiveBytesPerSecond"`
	NetTxBytesPerSecond     *float64 `json:"networkTransmitBytesPerSecond"`
}

// Pair is what Rows reads: two scrapes of one endpoint and the time between them.
type Pair struct {
	First, Second Families
	Elapsed       time.Duration
	// Node is the node the endpoint belongs to, used for series without a node label ("":
	// such series have an empty Node).
	Node string
}

// figure says where one metric goes in a Row.
type figure struct {
	metric  string
	counter bool
	field   func(*Row) **float64
}

var figures = []figure{
	{MetricCPUUsageSeconds, true, func(r *Row) **float64 { return &r.CPUCores }},
	{MetricMemoryResident, false, func(r *Row) **float64 { return &r.MemoryResidentBytes }},
	{MetricMemoryDomain, false, func(r *Row) **float64 { return &r.MemoryDomainBytes }},
	{MetricStorageReadBytes, true, func(r *Row) **float64 { return &r.DiskReadBytesPerSecond }},
	{MetricStorageWriteByte, true, func(r *Row) **float64 { return &r.DiskWriteBytesPerSecond }},
	{MetricNetworkRxBytes, true, func(r *Row) **float64 { return &r.NetRxBytesPerSecond }},
	{MetricNetworkTxBytes, true, func(r *Row) **float64 { return &r.NetTxBytesPerSecond }},
}

// Rows computes the figures of every VMI in p.Second, sorted by namespace, name and node.
// Rates are unknown when p.Elapsed is not positive.
func Rows(p Pair) []Row {
	rows := map[VMI]*Row{}
	row := func(v VMI) *Row {
		r, ok := rows[v]
		if !ok {
			r = &Row{VMI: v}
			rows[v] = r
		}
		return r
	}
	secs := p.Elapsed.Seconds()
	for _, f := range figures {
		before := index(p.First[f.metric], p.Node)
		for _, s := range series(p.Second[f.metric], p.Node) {
			r := row(s.vmi)
			if !f.counter {
				add(f.field(r), s.value)
				continue
			}
			prev, ok := before[s.id]
			if !ok || secs <= 0 {
				continue
			}
			inc := s.value - prev
			if inc < 0 { // reset: the counter restarted from zero
				inc = s.value
			}
			add(f.field(r), inc/secs)
		}
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	Sort(out)
	return out
}

func add(dst **float64, v float64) {
	if *dst == nil {
		*dst = new(float64)
	}
	**dst += v
}

// sample is one series' value in one scrape.
type sample struct {
	vmi   VMI
	id    string // the full label set: the series' identity across scrapes
	value float64
}

// series lists the samples of a family that carry a VMI's namespace and name.
func series(mf *dto.MetricFamily, node string) []sample {
	var out []sample
	for _, m := range mf.GetMetric() {
		v, ok := value(m)
		if !ok {
			continue
		}
		s := sample{vmi: VMI{Node: node}, value: v}
		ids := make([]string, 0, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case LabelNamespace:
				s.vmi.Namespace = l.GetValue()
			case LabelName:
				s.vmi.Name = l.GetValue()
			case LabelNode:
				s.vmi.Node = l.GetValue()
			}
			ids = append(ids, l.GetName()+"\x00"+l.GetValue())
		}
		if s.vmi.Namespace == "" || s.vmi.Name == "" {
			continue
		}
		slices.Sort(ids)
		s.id = strings.Join(ids, "\x01")
		out = append(out, s)
	}
	return out
}

// index maps a family's series identities to their values.
func index(mf *dto.MetricFamily, node string) map[string]float64 {
	ss := series(mf, node)
	m := make(map[string]float64, len(ss))
	for _, s := range ss {
		m[s.id] = s.value
	}
	return m
}

// value is a sample's number whatever the family's declared type.
func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// Sort orders rows by namespace, name, then node.
func Sort(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		return strings.Compare(a.Namespace+"\x00"+a.Name+"\x00"+a.Node, b.Namespace+"\x00"+b.Name+"\x00"+b.Node)
	})
}

// Filter keeps the rows in namespace ("": all) and, when name is not "", named name.
func Filter(rows []Row, namespace, name string) []Row {
	var out []Row
	for _, r := range rows {
		if (namespace == "" || r.Namespace == namespace) && (name == "" || r.Name == name) {
			out = append(out, r)
		}
	}
	return out
}
