package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// scraped is one scrape of /metrics, parsed by Prometheus' text parser.
type scraped map[string]*dto.MetricFamily

// scrapeMetrics GETs url and parses the exposition.
func scrapeMetrics(t testing.TB, url string) scraped {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)) // the registry's error
		t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return mfs
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func matches(m *dto.Metric, want map[string]string) bool {
	l := labelsOf(m)
	for k, v := range want {
		if l[k] != v {
			return false
		}
	}
	return true
}

// sum adds the values of name's series that carry the labels in want; n is how many there were.
func (s scraped) sum(name string, want map[string]string) (v float64, n int) {
	for _, m := range s[name].GetMetric() {
		if !matches(m, want) {
			continue
		}
		n++
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v, n
}

// of lists the families that have a series with the labels in want.
func (s scraped) of(want map[string]string) []string {
	var out []string
	for name, mf := range s {
		for _, m := range mf.GetMetric() {
			if matches(m, want) {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

var promTypes = map[vmimetrics.Kind]dto.MetricType{
	vmimetrics.Counter: dto.MetricType_COUNTER, vmimetrics.Gauge: dto.MetricType_GAUGE, vmimetrics.Histogram: dto.MetricType_HISTOGRAM,
}

// filledToday are the KubeVirt families the launcher fills today (the has_* fields aside),
// each with the labels beyond node/namespace/name its series carry.
var filledToday = map[string][]string{
	"kubevirt_vmi_cpu_usage_seconds_total":                {},
	"kubevirt_vmi_cpu_user_usage_seconds_total":           {},
	"kubevirt_vmi_cpu_system_usage_seconds_total":         {},
	"kubevirt_vmi_vcpu_seconds_total":                     {"id", "state"},
	"kubevirt_vmi_memory_resident_bytes":                  {},
	"kubevirt_vmi_memory_domain_bytes":                    {},
	"kubevirt_vmi_storage_read_traffic_bytes_total":       {"drive"},
	"kubevirt_vmi_storage_write_traffic_bytes_total":      {"drive"},
	"kubevirt_vmi_storage_iops_read_total":                {"drive"},
	"kubevirt_vmi_storage_iops_write_total":               {"drive"},
	"kubevirt_vmi_storage_read_times_seconds_total":       {"drive"},
	"kubevirt_vmi_storage_write_times_seconds_total":      {"drive"},
	"kubevirt_vmi_storage_flush_requests_total":           {"drive"},
	"kubevirt_vmi_network_receive_bytes_total":            {"interface"},
	"kubevirt_vmi_network_transmit_bytes_total":           {"interface"},
	"kubevirt_vmi_network_receive_packets_total":          {"interface"},
	"kubevirt_vmi_network_transmit_packets_total":         {"interface"},
	"kubevirt_vmi_network_receive_packets_dropped_total":  {"interface"},
	"kubevirt_vmi_network_transmit_packets_dropped_total": {"interface"},
}

// vcpuThreads are the host thread ids of the domain's vCPUs.
func vcpuThreads(t *testing.T, c *launcher.Client) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tids []int32
	for _, v := range st.GetVcpus() {
		tids = append(tids, v.GetThreadId())
	}
	if len(tids) == 0 {
		t.Fatal("no vCPU threads")
	}
	return tids
}

// schedstat sums the threads' time on a CPU and waiting on a run queue (seconds), from
// /proc/<pid>/task/<tid>/schedstat.
func schedstat(t *testing.T, pid int, tids []int32) (run, wait float64) {
	t.Helper()
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			t.Fatalf("schedstat %q", b)
		}
		r, err1 := strconv.ParseFloat(f[0], 64)
		w, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("schedstat %q", b)
		}
		run += r / 1e9
		wait += w / 1e9
	}
	return run, wait
}

func parseFloats(t *testing.T, out string, n int) []float64 {
	t.Helper()
	f := strings.Fields(out)
	if len(f) < n {
		t.Fatalf("guest printed %q, want %d numbers", out, n)
	}
	vs := make([]float64, n)
	for i := range vs {
		v, err := strconv.ParseFloat(f[len(f)-n+i], 64)
		if err != nil {
			t.Fatalf("guest printed %q: %v", out, err)
		}
		vs[i] = v
	}
	return vs
}

// TestVMIMetrics: the node agent's /metrics (the collector on controller-runtime's registry,
// served by promhttp, parsed by Prometheus' text parser) has KubeVirt's families, types, help
// texts and labels for a running VMI, and its counters follow what the test guest does: the
// bytes a synced write of a known size put on a virtio disk (within 10 %), the vCPU seconds of
// a timed busy loop (within 20 %), at least the bytes the guest's NIC sent; the VMI's series
// are gone once it is deleted.
func TestVMIMetrics(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	// As nodeagent.Setup adds each agent's source to the process's collector.
	col := vmimetrics.New(vmimetrics.Source{Node: testNode, VMIs: a.r.Client, Launchers: a.r,
		Overhead: vmimetrics.BudgetedOverhead(false, launcherpod.DefaultTCGCacheMiB)})
	if err := ctrlmetrics.Registry.Register(col); err != nil {
		t.Fatal(err)
	}
	defer ctrlmetrics.Registry.Unregister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	url := srv.URL + "/metrics"

	vmi := masqueradeVMI("metrics")
	vmi.Labels = map[string]string{"app.kubernetes.io/name": "metrics-e2e"}
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, vmletv1.Volume{Name: "scratch",
		VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}})
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: "scratch", Serial: "scratch"})
	ctx := context.Background()
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	running := mustGetVMI(t, vmi)
	lc := launcherClient(t, a, running)
	ours := map[string]string{"node": testNode, "namespace": vmi.Namespace, "name": vmi.Name}

	// Names, types, help texts and labels.
	s := scrapeMetrics(t, url)
	fams := map[string]*vmimetrics.Family{}
	for _, f := range vmimetrics.Families() {
		fams[f.Name] = f
	}
	for name, extra := range filledToday {
		mf := s[name]
		f := fams[name]
		if mf == nil || f == nil {
			t.Errorf("%s: not exported (family listed: %v)", name, f != nil)
			continue
		}
		if mf.GetType() != promTypes[f.Kind] || mf.GetHelp() != f.Help {
			t.Errorf("%s: type %v help %q, want %v %q", name, mf.GetType(), mf.GetHelp(), promTypes[f.Kind], f.Help)
		}
		_, n := s.sum(name, ours)
		if n == 0 {
			t.Errorf("%s: no series of %s/%s on %s", name, vmi.Namespace, vmi.Name, testNode)
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labelsOf(m)
			for _, want := range append([]string{"node", "namespace", "name", "kubernetes_vmi_label_app_kubernetes_io_name"}, extra...) {
				if _, ok := l[want]; !ok {
					t.Errorf("%s %v: no label %s", name, l, want)
				}
			}
		}
	}
	if v, n := s.sum("kubevirt_vmi_info", map[string]string{"name": vmi.Name, "phase": "running", "node": testNode}); n != 1 || v != 1 {
		t.Errorf("kubevirt_vmi_info of the running VMI: %v in %d series", v, n)
	}
	if v, _ := s.sum("kubevirt_vmi_launcher_memory_overhead_bytes", map[string]string{"name": vmi.Name}); v < 100<<20 {
		t.Errorf("launcher memory overhead %v bytes", v)
	}
	if v, _ := s.sum("kubevirt_vmi_phase_transition_time_seconds", map[string]string{"phase": "Running"}); v < 1 {
		t.Errorf("no phase transition to Running observed (%v)", v)
	}
	if v, _ := s.sum("vmlet_launcher_starts_total", map[string]string{"result": "success"}); v < 1 {
		t.Errorf("no launcher start counted (%v)", v)
	}
	if v, _ := s.sum("vmlet_vmi_reconcile_total", nil); v < 1 {
		t.Errorf("no reconcile counted (%v)", v)
	}
	if v, _ := s.sum("vmlet_image_pulls_total", map[string]string{"result": "success"}); v < 1 {
		t.Errorf("no image pull counted (%v)", v)
	}
	for _, name := range []string{"kubevirt_vmi_vcpu_delay_seconds_total", "kubevirt_vmi_memory_actual_balloon_bytes"} {
		if _, n := s.sum(name, ours); n > 0 {
			t.Logf("%s exported (the launcher fills it now)", name)
		}
	}

	// CPU: a busy loop of about 3 s, timed by the guest. The guest's clock runs with the
	// host's (TCG, no steal time): on a loaded host the vCPU ran only the share of the loop the
	// host scheduler gave its thread, run/(run+wait) of its schedstat (wait: time on the run
	// queue, KubeVirt's vcpu_delay), which the test reads from /proc itself.
	tids := vcpuThreads(t, lc)
	qpid := qemuPid(t, a, string(running.UID))
	if v, _ := scrapeMetrics(t, url).sum("vmlet_launcher_rpc_duration_seconds", map[string]string{"method": "DomainStats", "code": "OK"}); v < 1 {
		t.Errorf("no DomainStats call timed by the launcher RPC interceptor (%v)", v)
	}
	before := scrapeMetrics(t, url)
	run0, wait0 := schedstat(t, qpid, tids)
	out := guestRun(t, lc, `a=$(cut -d' ' -f1 /proc/uptime); timeout 3 sh -c 'while :; do :; done' || true; b=$(cut -d' ' -f1 /proc/uptime); echo $a $b`)
	run1, wait1 := schedstat(t, qpid, tids)
	after := scrapeMetrics(t, url)
	up := parseFloats(t, out, 2)
	busy := up[1] - up[0]
	// The host ran the vCPU thread run/(run+wait) of the time it was runnable.
	ran := busy * (run1 - run0) / ((run1 - run0) + (wait1 - wait0))
	v0, _ := before.sum("kubevirt_vmi_vcpu_seconds_total", ours)
	v1, _ := after.sum("kubevirt_vmi_vcpu_seconds_total", ours)
	c0, _ := before.sum("kubevirt_vmi_cpu_usage_seconds_total", ours)
	c1, _ := after.sum("kubevirt_vmi_cpu_usage_seconds_total", ours)
	t.Logf("busy loop %.2f s in the guest; vCPU thread ran %.2f s and waited %.2f s for a host CPU (schedstat), so the guest's busy time on a host CPU was %.2f s: vCPU seconds +%.2f, QEMU CPU seconds +%.2f",
		busy, run1-run0, wait1-wait0, ran, v1-v0, c1-c0)
	if busy < 2.5 || ran < 0.5 {
		t.Fatalf("the busy loop lasted %.2f s and the vCPU could run %.2f s of it: too little to measure", busy, ran)
	}
	if d := v1 - v0; d < 0.8*ran || d > 1.2*ran {
		t.Errorf("vCPU seconds rose by %.2f while the guest was busy for %.2f s (%.2f s on a host CPU): not within 20 %%", d, busy, ran)
	}
	if c1-c0 < v1-v0 {
		t.Errorf("QEMU's CPU seconds (+%.2f) below its vCPUs' (+%.2f)", c1-c0, v1-v0)
	}

	// Disk: 16 MiB written past the guest's page cache to the scratch disk.
	dev := guestDisksBySerial(t, lc)["scratch"].dev
	if dev == "" {
		t.Fatal("no scratch disk in the guest")
	}
	drive := map[string]string{"node": testNode, "name": vmi.Name, "drive": "scratch"}
	before = scrapeMetrics(t, url)
	const written = 16 << 20
	guestRun(t, lc, fmt.Sprintf("dd if=/dev/zero of=/dev/%s bs=1M count=16 oflag=direct 2>&1", dev))
	after = scrapeMetrics(t, url)
	w0, n := before.sum("kubevirt_vmi_storage_write_traffic_bytes_total", drive)
	w1, _ := after.sum("kubevirt_vmi_storage_write_traffic_bytes_total", drive)
	if n != 1 {
		t.Fatalf("%d write traffic series for drive scratch: %v", n, before.of(map[string]string{"name": vmi.Name}))
	}
	t.Logf("guest wrote %d bytes: write traffic +%.0f", written, w1-w0)
	if d := w1 - w0; d < 0.9*written || d > 1.1*written {
		t.Errorf("write traffic rose by %.0f bytes for %d written: not within 10 %%", d, written)
	}
	o0, _ := before.sum("kubevirt_vmi_storage_iops_write_total", drive)
	o1, _ := after.sum("kubevirt_vmi_storage_iops_write_total", drive)
	if o1-o0 < 16 {
		t.Errorf("write ops rose by %.0f for 16 direct 1 MiB writes", o1-o0)
	}

	// Network: large pings (fragmented, 4 × 30 KB each way) from the guest to its gateway;
	// the guest's NIC counts what it sent and received.
	nic := map[string]string{"node": testNode, "name": vmi.Name, "interface": "testmasquerade"}
	before = scrapeMetrics(t, url)
	out = guestRun(t, lc, `s=/sys/class/net/eth0/statistics; a=$(cat $s/tx_bytes); c=$(cat $s/rx_bytes); ping -q -c 4 -s 30000 10.0.2.1 >/dev/null; b=$(cat $s/tx_bytes); d=$(cat $s/rx_bytes); echo $a $b $c $d`)
	after = scrapeMetrics(t, url)
	g := parseFloats(t, out, 4)
	sent, received := g[1]-g[0], g[3]-g[2]
	x0, n := before.sum("kubevirt_vmi_network_transmit_bytes_total", nic)
	x1, _ := after.sum("kubevirt_vmi_network_transmit_bytes_total", nic)
	if n != 1 {
		t.Fatalf("%d transmit series for interface testmasquerade: %v", n, before.of(map[string]string{"name": vmi.Name}))
	}
	r0, _ := before.sum("kubevirt_vmi_network_receive_bytes_total", nic)
	r1, _ := after.sum("kubevirt_vmi_network_receive_bytes_total", nic)
	t.Logf("guest NIC sent %.0f and received %.0f bytes: transmit bytes +%.0f, receive bytes +%.0f", sent, received, x1-x0, r1-r0)
	if sent < 4*30000 || received < 4*30000 {
		t.Fatalf("the guest sent %.0f and received %.0f bytes: the pings did not go through", sent, received)
	}
	if x1-x0 < sent {
		t.Errorf("transmit bytes rose by %.0f, the guest sent %.0f", x1-x0, sent)
	}
	if r1-r0 < received {
		t.Errorf("receive bytes rose by %.0f, the guest received %.0f", r1-r0, received)
	}

	// Deleted: its series go.
	if err := env.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	// The collector reads the agent's informer cache, which hears of the deletion a moment
	// after the API server answers NotFound.
	poll.Until(t, 10*time.Second, "the deleted VMI's series gone", func() (bool, string) {
		s := scrapeMetrics(t, url)
		left := append(s.of(map[string]string{"name": vmi.Name}), s.of(map[string]string{"vmi": vmi.Name})...)
		return len(left) == 0, fmt.Sprintf("series left: %v", left)
	})
}

// TestVMIMigrationMetrics: while a live migration (slowed to 16 MiB/s) runs, the source node's
// /metrics has KubeVirt's migration progress for the VMI; once it succeeded, the migration's
// outcome (kubevirt_vmi_migration_succeeded with the migration's name) and the VMI's domain
// stats come from the target node, and the progress series are gone. One collector serves
// both nodes' agents, as in local mode.
func TestVMIMigrationMetrics(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	n := startTwoNodes(t)
	defer n.stop(t)
	setMigrationConfig(t, "bandwidthPerMigration: 16Mi\n")
	defer setMigrationConfig(t, "")
	source := func(a *agent) vmimetrics.Source {
		return vmimetrics.Source{Node: a.r.NodeName, VMIs: a.r.Client, Migrations: a.r.Client, Launchers: a.r}
	}
	col := vmimetrics.New(source(n.a), source(n.b))
	if err := ctrlmetrics.Registry.Register(col); err != nil {
		t.Fatal(err)
	}
	defer ctrlmetrics.Registry.Unregister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	url := srv.URL + "/metrics"

	ctx := context.Background()
	vmi := masqueradeVMI("migmetrics")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 30*time.Second)

	mkey := startMigration(t, vmi, "migmetrics-1")
	onSource := map[string]string{"node": testNode, "namespace": vmi.Namespace, "name": vmi.Name}
	var progressSeen string
	eventually(t, 2*time.Minute, "migration progress on /metrics", func() (bool, string) {
		s := scrapeMetrics(t, url)
		processed, n := s.sum("kubevirt_vmi_migration_data_processed_bytes", onSource)
		_, nr := s.sum("kubevirt_vmi_migration_data_remaining_bytes", onSource)
		total, nt := s.sum("kubevirt_vmi_migration_data_bytes_total", onSource)
		_, nd := s.sum("kubevirt_vmi_migration_dirty_memory_rate_bytes", onSource)
		// The last pass's throughput, in bytes per second: above 0 and within the 16 MiB/s
		// bandwidth limit (QEMU reports megabits per second; a unit slip is 8× or 10^6× off).
		rate, nx := s.sum("kubevirt_vmi_migration_memory_transfer_rate_bytes", onSource)
		progressSeen = fmt.Sprintf("processed %v (%d series), remaining %d, total %v (%d), dirty rate %d, transfer rate %v (%d)", processed, n, nr, total, nt, nd, rate, nx)
		return n == 1 && nr == 1 && nt == 1 && nd == 1 && nx == 1 && processed > 0 && total >= 128<<20 &&
			rate > 0 && rate <= 1.25*(16<<20), progressSeen
	})
	t.Logf("mid-migration on the source: %s", progressSeen)
	m := waitMigration(t, mkey, 2*time.Minute)
	if m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration ended %s", m.Status.Phase)
	}
	onTarget := map[string]string{"node": secondNode, "namespace": vmi.Namespace, "name": vmi.Name}
	eventually(t, time.Minute, "the migration's outcome and the VMI's stats from the target", func() (bool, string) {
		s := scrapeMetrics(t, url)
		ok, _ := s.sum("kubevirt_vmi_migration_succeeded", map[string]string{"vmi": vmi.Name, "vmim": "migmetrics-1", "namespace": vmi.Namespace})
		_, failed := s.sum("kubevirt_vmi_migration_failed", map[string]string{"vmi": vmi.Name})
		_, cpuTarget := s.sum("kubevirt_vmi_cpu_usage_seconds_total", onTarget)
		_, cpuSource := s.sum("kubevirt_vmi_cpu_usage_seconds_total", onSource)
		_, progress := s.sum("kubevirt_vmi_migration_data_remaining_bytes", map[string]string{"name": vmi.Name})
		return ok == 1 && failed == 0 && cpuTarget == 1 && cpuSource == 0 && progress == 0,
			fmt.Sprintf("succeeded %v, failed series %d, cpu series on target %d / source %d, progress series %d", ok, failed, cpuTarget, cpuSource, progress)
	})
}
