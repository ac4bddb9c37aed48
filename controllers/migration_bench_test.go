package controllers_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// migBenchVariant is one kind of migration BenchmarkMigrateAPI measures.
type migBenchVariant struct {
	name  string
	dirty bool // the guest rewrites migBenchDirtyMiB of its memory all along
	tls   bool // TLS between the relays (the default); false: disableTLS: true
}

var migBenchVariants = []migBenchVariant{
	{"idle-tls", false, true}, {"idle-plain", false, false},
	{"dirty-tls", true, true}, {"dirty-plain", true, false},
}

const (
	migBenchGuest    = "1Gi"
	migBenchSmall    = "512Mi" // when the host lacks the memory for two 1 GiB QEMUs (+ margin)
	migBenchNeed     = 4 << 30
	migBenchDirtyMiB = 64
)

// migSample is one migration as the API and QEMU saw it.
type migSample struct {
	wall, total, down time.Duration
	bytes             int64 // guest memory sent (dataProcessedBytes)
	failed            bool  // the migration failed: the guest stayed
	noProgress        bool  // succeeded, but migrationState.progress lacks QEMU's final figures
}

// BenchmarkMigrateAPI measures live migration through the API: a VirtualMachineInstanceMigration
// created → its phase Succeeded, between two node agents on this host (startTwoNodes: loopback
// migration networks relayed by the agents, TLS between the relays with node certificates from
// a test CA; 1 + 2 multifd channels and the stepped downtime limit, as every migration).
// The guest has 1 GiB (512 MiB, saying so on stderr, when MemAvailable is under 4 GiB) and a
// masquerade interface. Each round migrates it there and back (2 samples) in each of four
// variants, interleaved round by round in a rotating order: idle or dirtying (a busybox dd loop
// rewriting 64 MiB of tmpfs), TLS on (the default) or off (disableTLS: true in the migration
// ConfigMap). -benchtime Nx is N rounds (1x: one round of each variant, as `make bench` runs).
//
// A warm-up migration there and back comes first and is not counted. Per variant it reports
// P50/P95 of the wall time (<v>-api-total), of QEMU's total time and
// downtime from migrationState.progress (<v>-qemu-total, <v>-downtime), of the API overhead =
// wall − QEMU total (<v>-api-overhead), and QEMU's throughput (<v>-MiB/s: dataProcessedBytes /
// total time, mean). The wall time is polled every 10 ms. Failed migrations (<v>-failed) and
// succeeded ones whose migrationState.progress never got QEMU's final figures (<v>-no-progress:
// only their wall time counts) are counted, not fatal; every sample is also printed on stderr
// with the load average. The QEMU-level floor (two QEMUs, no
// agent) is qemu's BenchmarkMigration1G: its helpers live in that package's tests, which
// cannot be imported here; run it right after, on the same machine.
//
// VMLET_BENCH_MIG_MEM overrides the guest's memory (a quantity; at least 512Mi: the dirtying
// loop keeps 128 MiB in the guest's tmpfs).
func BenchmarkMigrateAPI(b *testing.B) {
	prereq.Root(b)
	prereq.QEMU(b)
	testguest.Assets(b)
	mem := migBenchGuest
	if m := os.Getenv("VMLET_BENCH_MIG_MEM"); m != "" {
		if _, err := resource.ParseQuantity(m); err != nil {
			b.Fatalf("VMLET_BENCH_MIG_MEM=%q: %v", m, err)
		}
		mem = m
	} else if avail := memAvailable(); avail < migBenchNeed {
		mem = migBenchSmall
		fmt.Fprintf(os.Stderr, "BenchmarkMigrateAPI: %d MiB available, under %d MiB: the guest has %s instead of %s\n",
			avail>>20, migBenchNeed>>20, mem, migBenchGuest)
	}
	n := startTwoNodes(b)
	defer n.stop(b)
	defer setMigrationConfig(b, "")

	vmi := masqueradeVMI("migbench")
	q := resource.MustParse(mem)
	vmi.Spec.Domain.Memory.Guest = &q
	ctx := context.Background()
	if err := env.Client.Create(ctx, vmi); err != nil {
		b.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(b, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(b, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 3*time.Minute)
	vmi = waitCondition(b, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	node := vmi.Status.NodeName
	// The dirtying loop's source, written once (it stays in guest memory, idle, in every variant).
	guestShell(b, n.on(node), vmi, fmt.Sprintf("head -c %dm /dev/urandom > /tmp/src; cp /tmp/src /tmp/dirty", migBenchDirtyMiB))

	// A warm-up there and back, not counted: the first migration of a run paid ≈1.3 s more
	// than the rest (the second node's first launcher, first pulls and caches).
	for _, dir := range []string{"there", "back"} {
		_, node = benchMigrate(b, n, vmi, "migbench-warmup-"+dir, node)
	}
	samples := map[string][]migSample{}
	round := 0
	for b.Loop() {
		for k := range migBenchVariants {
			v := migBenchVariants[(round+k)%len(migBenchVariants)]
			cfg := ""
			if !v.tls {
				cfg = "disableTLS: true\n"
			}
			setMigrationConfig(b, cfg)
			if v.dirty {
				guestShell(b, n.on(node), vmi, "(while :; do dd if=/tmp/src of=/tmp/dirty bs=1M conv=notrunc 2>/dev/null; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/dirty.pid")
			}
			for _, dir := range []string{"there", "back"} {
				s, to := benchMigrate(b, n, vmi, fmt.Sprintf("migbench-%d-%s-%s", round, v.name, dir), node)
				samples[v.name] = append(samples[v.name], s)
				node = to
			}
			if v.dirty {
				guestShell(b, n.on(node), vmi, "kill $(cat /tmp/dirty.pid)")
			}
		}
		round++
	}
	for _, v := range migBenchVariants {
		var wall, total, down, over []time.Duration
		var bytes int64
		var ms time.Duration
		failed, noProgress := 0, 0
		for _, s := range samples[v.name] {
			switch {
			case s.failed:
				failed++
				continue
			case s.noProgress:
				noProgress++
				wall = append(wall, s.wall)
				continue
			}
			wall, total, down, over = append(wall, s.wall), append(total, s.total), append(down, s.down), append(over, s.wall-s.total)
			bytes, ms = bytes+s.bytes, ms+s.total
		}
		b.ReportMetric(float64(failed), v.name+"-failed")
		b.ReportMetric(float64(noProgress), v.name+"-no-progress")
		report(b, v.name+"-api-total", wall)
		report(b, v.name+"-qemu-total", total)
		report(b, v.name+"-api-overhead", over)
		report(b, v.name+"-downtime", down)
		if ms > 0 {
			b.ReportMetric(float64(bytes)/(1<<20)/ms.Seconds(), v.name+"-MiB/s")
		}
	}
	b.ReportMetric(0, "ns/op") // one op is a round of 8 migrations plus waits: not meaningful
}

// benchMigrate migrates vmi away from node through a VirtualMachineInstanceMigration and
// returns the sample and the node the guest is on afterwards, once it is ready there again
// (Ready, migratable, its agent connected) and the other node has nothing of it. A failed
// migration (the guest stays) is said on stderr and returned as failed; a sample whose
// migrationState never got QEMU's figures has noProgress set (its wall time still counts).
func benchMigrate(b *testing.B, n *twoNodes, vmi *vmletv1.VirtualMachineInstance, name, node string) (s migSample, to string) {
	b.Helper()
	ctx := context.Background()
	m := &vmletv1.VirtualMachineInstanceMigration{}
	m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, name, vmi.Name
	start := time.Now()
	if err := env.Client.Create(ctx, m); err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithDeadline(ctx, start.Add(3*time.Minute))
	last, ended := watchFor(wctx, b, &vmletv1.VirtualMachineInstanceMigrationList{}, client.ObjectKeyFromObject(m),
		func(m *vmletv1.VirtualMachineInstanceMigration) bool { return migration.Final(m.Status.Phase) })
	cancel()
	if !ended {
		phase := "unseen"
		if last != nil {
			phase = string(last.Status.Phase)
		}
		b.Fatalf("%s: not ended after 3m: phase %s", name, phase)
	}
	m = last
	s.wall, to = time.Since(start), node
	key := client.ObjectKeyFromObject(vmi)
	if m.Status.Phase != vmletv1.MigrationSucceeded {
		s.failed = true
		reason := ""
		if ms := m.Status.MigrationState; ms != nil {
			reason = ms.FailureReason
		}
		fmt.Fprintf(os.Stderr, "BenchmarkMigrateAPI: %s (%s): phase %s after %s: %s\n", name, m.UID, m.Status.Phase, s.wall.Round(time.Millisecond), reason)
	} else {
		// QEMU's figures can lag the completion (NOTES.md): wait a little for them.
		var p *vmletv1.MigrationProgress
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		watchFor(wctx, b, &vmletv1.VirtualMachineInstanceList{}, key, func(v *vmletv1.VirtualMachineInstance) bool {
			ms := v.Status.MigrationState
			if ms == nil || ms.MigrationUID != m.UID || v.Status.NodeName == node {
				return false
			}
			to, p = v.Status.NodeName, ms.Progress
			// QEMU's final figures: a completed migration always paused the guest a little;
			// downtime 0 is a figure read while it ran.
			return p != nil && p.TotalTimeMilliseconds > 0 && p.DowntimeMilliseconds > 0
		})
		cancel()
		if to == node {
			b.Fatalf("%s: succeeded but the vmi is still on %s", name, node)
		}
		if p == nil || p.TotalTimeMilliseconds == 0 || p.DowntimeMilliseconds == 0 {
			s.noProgress = true
			fmt.Fprintf(os.Stderr, "BenchmarkMigrateAPI: %s: succeeded, but migrationState.progress lacks QEMU's final figures (no total time or downtime): %+v\n", name, p)
		} else {
			s.total = time.Duration(p.TotalTimeMilliseconds) * time.Millisecond
			s.down = time.Duration(p.DowntimeMilliseconds) * time.Millisecond
			s.bytes = p.DataProcessedBytes
		}
	}
	// The next migration is admitted only once the vmi's state says this one ended.
	eventually(b, 30*time.Second, name+": migrationState ended", func() (bool, string) {
		ms := mustGetVMI(b, vmi).Status.MigrationState
		return ms == nil || ms.MigrationUID != m.UID || ms.Completed || ms.Failed, fmt.Sprintf("%+v", ms)
	})
	// Generous deadlines: with the other core busy, a 1 GiB TCG guest is slow to answer.
	waitCondition(b, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	waitCondition(b, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 2*time.Minute)
	waitLauncherAgentFor(b, n.on(to), string(vmi.UID), 2*time.Minute)
	other := secondNode
	if to == secondNode {
		other = testNode
	}
	netnsDir, volumes := testNet.cfg.NetnsDir, volumeRoot
	if other == secondNode {
		netnsDir, volumes = n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot
	}
	waitLeft(b, n.on(other), netnsDir, volumes, string(vmi.UID))
	// Each sample as it comes (load average with it), so that a run cut short still says something.
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(os.Stderr, "BenchmarkMigrateAPI: %s: wall %s qemu-total %s downtime %s sent %d MiB failed=%t no-progress=%t load %s",
		name, s.wall.Round(time.Millisecond), s.total, s.down, s.bytes>>20, s.failed, s.noProgress, la)
	return s, to
}

// watchFor watches the object key (of list's kind) until done holds for a version of it or ctx
// ends, and returns the last version seen and whether done held. The watch begins with the
// object as it is, so nothing that happened before the call is missed.
func watchFor[T client.Object](ctx context.Context, tb testing.TB, list client.ObjectList, key client.ObjectKey, done func(T) bool) (T, bool) {
	tb.Helper()
	var last T
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := wc.Watch(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name})
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return last, false // closed: ctx ended (or the server ended the watch)
			}
			if o, isT := ev.Object.(T); isT {
				last = o
				if done(o) {
					return o, true
				}
			}
		case <-ctx.Done():
			return last, false
		}
	}
}
