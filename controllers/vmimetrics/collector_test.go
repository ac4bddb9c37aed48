package vmimetrics

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// fakeLaunchers answers by VMI UID: a response, an error, or a call that blocks until its
// context ends; it records how many calls ran at once.
type fakeLaunchers struct {
	stats map[types.UID]*pb.DomainStatsResponse
	errs  map[types.UID]error
	block map[types.UID]bool
	mig   map[types.UID]*pb.MigrationStatus
	// gate, if set, holds every call until it is closed; entered receives one value per call.
	gate    chan struct{}
	entered chan struct{}

	mu             sync.Mutex
	inFlight, peak int
}

func (f *fakeLaunchers) DomainStats(ctx context.Context, uid types.UID) (*pb.DomainStatsResponse, error) {
	f.mu.Lock()
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	if f.block[uid] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := f.errs[uid]; err != nil {
		return nil, err
	}
	if st, ok := f.stats[uid]; ok {
		return st, nil
	}
	return nil, ErrNoLauncher
}

func (f *fakeLaunchers) MigrationProgress(_ context.Context, uid types.UID) (*pb.MigrationStatus, error) {
	if m, ok := f.mig[uid]; ok {
		return m, nil
	}
	return nil, ErrNoLauncher
}

func testVMIOn(node, name string) *vmletv1.VirtualMachineInstance {
	return &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Status:     vmletv1.VirtualMachineInstanceStatus{NodeName: node, Phase: vmletv1.Running},
	}
}

func reader(t *testing.T, objs ...*vmletv1.VirtualMachineInstance) client.Reader {
	t.Helper()
	s := runtime.NewScheme()
	if err := vmletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s)
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	return b.Build()
}

// gatherSamples registers c on a fresh registry, gathers once and returns the samples by
// name{labels}.
func gatherSamples(t *testing.T, c prometheus.Collector) map[string]sample {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]sample{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := sample{name: mf.GetName(), labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out[s.key()] = s
		}
	}
	return out
}

// TestCollectorSources: one collector serves several nodes' sources; each VMI's series carry
// its node; a VMI without a live launcher has its info but no domain stats and is no error; a
// failing or hanging launcher is skipped within the deadline and counted; a VMI of another
// node is not this source's.
func TestCollectorSources(t *testing.T) {
	a1, a2, a3, a4 := testVMIOn("node-a", "a1"), testVMIOn("node-a", "a2"), testVMIOn("node-a", "a3"), testVMIOn("node-a", "a4")
	b1, c1 := testVMIOn("node-b", "b1"), testVMIOn("node-c", "c1")
	vmis := reader(t, a1, a2, a3, a4, b1, c1)
	la := &fakeLaunchers{
		stats: map[types.UID]*pb.DomainStatsResponse{a1.UID: full()},
		errs:  map[types.UID]error{a3.UID: errors.New("launcher said no")},
		block: map[types.UID]bool{a4.UID: true},
	}
	lb := &fakeLaunchers{stats: map[types.UID]*pb.DomainStatsResponse{b1.UID: full()}}
	c := New(Source{Node: "node-a", VMIs: vmis, Launchers: la, Overhead: func(*vmletv1.VirtualMachineInstance) (int64, bool) { return 42, true }})
	c.Timeout = 50e6 // 50 ms
	removeB := c.Add(Source{Node: "node-b", VMIs: vmis, Launchers: lb})
	errsBefore := testutil.ToFloat64(scrapeErrors.WithLabelValues("node-a", "domain_stats"))

	got := gatherSamples(t, c)
	cpu := func(v *vmletv1.VirtualMachineInstance) string {
		return sample{name: "kubevirt_vmi_cpu_usage_seconds_total", labels: map[string]string{"node": v.Status.NodeName, "namespace": "ns", "name": v.Name, "kubernetes_vmi_label_app": v.Name}}.key()
	}
	for v, want := range map[*vmletv1.VirtualMachineInstance]bool{a1: true, a2: false, a3: false, a4: false, b1: true, c1: false} {
		if _, ok := got[cpu(v)]; ok != want {
			t.Errorf("%s: domain stats exported %v, want %v", v.Name, ok, want)
		}
	}
	infos := 0
	for _, s := range got {
		if s.name == "kubevirt_vmi_info" {
			infos++
			if s.labels["name"] == "c1" {
				t.Error("a VMI of an unserved node has info")
			}
		}
	}
	if infos != 5 {
		t.Errorf("%d info series, want 5 (node-a's 4, node-b's 1)", infos)
	}
	if _, ok := got[sample{name: "kubevirt_vmi_launcher_memory_overhead_bytes", labels: map[string]string{"namespace": "ns", "name": "a2"}}.key()]; !ok {
		t.Error("overhead of a VMI without a launcher missing")
	}
	if d := testutil.ToFloat64(scrapeErrors.WithLabelValues("node-a", "domain_stats")) - errsBefore; d != 2 {
		t.Errorf("%v scrape errors counted, want 2 (a3 failed, a4 timed out)", d)
	}

	removeB()
	if _, ok := gatherSamples(t, c)[cpu(b1)]; ok {
		t.Error("a removed source's VMI still exported")
	}
}

// TestCollectorConcurrency: no more than Concurrency launcher calls run at once, and they do
// run concurrently.
func TestCollectorConcurrency(t *testing.T) {
	var objs []*vmletv1.VirtualMachineInstance
	l := &fakeLaunchers{stats: map[types.UID]*pb.DomainStatsResponse{}, gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	for _, n := range []string{"v1", "v2", "v3", "v4", "v5", "v6"} {
		v := testVMIOn("node-a", n)
		objs = append(objs, v)
		l.stats[v.UID] = full()
	}
	c := New(Source{Node: "node-a", VMIs: reader(t, objs...), Launchers: l})
	c.Concurrency = 2
	done := make(chan map[string]sample)
	go func() { done <- gatherSamples(t, c) }()
	<-l.entered
	<-l.entered // two calls hold their slots
	close(l.gate)
	got := <-done
	if l.peak != 2 {
		t.Errorf("peak of %d calls at once, want 2", l.peak)
	}
	n := 0
	for _, s := range got {
		if s.name == "kubevirt_vmi_cpu_usage_seconds_total" {
			n++
		}
	}
	if n != 6 {
		t.Errorf("%d VMIs' CPU series, want 6", n)
	}
}

// TestCollectorMigration: a VMI whose outgoing migration runs on the node gets the migration
// progress; one whose migration ended gets its outcome with the migration's name.
func TestCollectorMigration(t *testing.T) {
	running, ended := testVMIOn("node-a", "m1"), testVMIOn("node-a", "m2")
	now := metav1.Now()
	running.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "node-a", TargetNode: "node-b", StartTimestamp: &now, MigrationUID: "mig-uid-1"}
	ended.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "node-b", StartTimestamp: &now, Completed: true, MigrationUID: "mig-uid-2"}
	mig := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "move-m2", UID: "mig-uid-2"}}
	s := runtime.NewScheme()
	if err := vmletv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	r := fake.NewClientBuilder().WithScheme(s).WithObjects(running, ended, mig).Build()
	l := &fakeLaunchers{
		stats: map[types.UID]*pb.DomainStatsResponse{running.UID: full(), ended.UID: full()},
		mig:   map[types.UID]*pb.MigrationStatus{running.UID: {Role: "source", Status: "active", TotalBytes: 10, RemainingBytes: 4, TransferredBytes: 6}},
	}
	got := gatherSamples(t, New(Source{Node: "node-a", VMIs: r, Migrations: r, Launchers: l}))
	if s, ok := got[sample{name: "kubevirt_vmi_migration_data_remaining_bytes", labels: map[string]string{"node": "node-a", "namespace": "ns", "name": "m1"}}.key()]; !ok {
		t.Errorf("no migration progress for m1: %v", s)
	}
	if _, ok := got[sample{name: "kubevirt_vmi_migration_succeeded", labels: map[string]string{"vmi": "m2", "vmim": "move-m2", "namespace": "ns"}}.key()]; !ok {
		t.Error("no outcome for m2")
	}
	for _, s := range got {
		if s.name == "kubevirt_vmi_migration_data_remaining_bytes" && s.labels["name"] == "m2" {
			t.Error("progress for an ended migration")
		}
	}
}

// TestCollectorMigrationHandover: while a migration hands a VMI over, the source agent's cache
// and the target's may both have it on their own node (one process serves both in local
// mode): its outcome and launcher overhead, which have no node label, are exported once, not
// twice (which failed the whole scrape: HTTP 500 in TestVMIMigrationMetrics).
func TestCollectorMigrationHandover(t *testing.T) {
	now := metav1.Now()
	ms := &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "node-a", TargetNode: "node-b", StartTimestamp: &now, Completed: true, MigrationUID: "mig-uid-1"}
	onSource, onTarget := testVMIOn("node-a", "m1"), testVMIOn("node-b", "m1")
	onSource.Status.MigrationState, onTarget.Status.MigrationState = ms, ms.DeepCopy()
	overhead := func(*vmletv1.VirtualMachineInstance) (int64, bool) { return 42, true }
	c := New(Source{Node: "node-a", VMIs: reader(t, onSource), Launchers: &fakeLaunchers{}, Overhead: overhead},
		Source{Node: "node-b", VMIs: reader(t, onTarget), Launchers: &fakeLaunchers{}, Overhead: overhead})
	n := map[string]int{}
	for _, s := range gatherSamples(t, c) { // fails on a series collected twice
		n[s.name]++
	}
	for _, name := range []string{"kubevirt_vmi_migration_succeeded", "kubevirt_vmi_launcher_memory_overhead_bytes"} {
		if n[name] != 1 {
			t.Errorf("%d %s series, want 1", n[name], name)
		}
	}
	if n["kubevirt_vmi_info"] != 2 {
		t.Errorf("%d info series, want 2 (one per node: the label tells them apart)", n["kubevirt_vmi_info"])
	}
}

// TestAddToProcess: several node agents of one process (local mode's nodes) share the one
// collector on controller-runtime's registry; each VMI carries its node; a removed agent's
// VMIs go.
func TestAddToProcess(t *testing.T) {
	a, b := testVMIOn("node-a", "pa"), testVMIOn("node-b", "pb")
	vmis := reader(t, a, b)
	removeA, err := AddToProcess(Source{Node: "node-a", VMIs: vmis, Launchers: &fakeLaunchers{stats: map[types.UID]*pb.DomainStatsResponse{a.UID: full()}}})
	if err != nil {
		t.Fatal(err)
	}
	removeB, err := AddToProcess(Source{Node: "node-b", VMIs: vmis, Launchers: &fakeLaunchers{stats: map[types.UID]*pb.DomainStatsResponse{b.UID: full()}}})
	if err != nil {
		t.Fatalf("second node: %v", err)
	}
	defer removeB()
	nodes := func() map[string]bool {
		mfs, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "kubevirt_vmi_cpu_usage_seconds_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "node" {
						out[l.GetValue()] = true
					}
				}
			}
		}
		return out
	}
	if got := nodes(); !got["node-a"] || !got["node-b"] || len(got) != 2 {
		t.Errorf("nodes with series: %v", got)
	}
	removeA()
	if got := nodes(); got["node-a"] || !got["node-b"] {
		t.Errorf("after node-a's agent left: %v", got)
	}
}
