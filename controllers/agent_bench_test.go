package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/test/prereq"
)

// BenchmarkCreateToRunning measures VMI creation → Ready=True (QEMU running the guest) through
// the real API server, agent, launcher and QEMU, for 1 and for 20 VMIs created 100 ms apart (the
// KubeVirt perf-scale shape), then spec.paused → Paused condition latency, and the agent's CPU
// and RSS with the VMIs running. Each iteration deletes its VMIs and waits until they are gone.
//
// VMLET_BENCH_VMIS overrides the counts ("1,20,100": what `make bench` runs). Runs of 50 VMIs
// or more use small guests (96 MiB, 16 MiB TCG cache: ≈170 MB of QEMU each, NOTES.md) and are
// skipped, saying why, when the host lacks the memory for them.
func BenchmarkCreateToRunning(b *testing.B) {
	for _, n := range benchVMIs(b) {
		b.Run(fmt.Sprintf("vmis=%d", n), func(b *testing.B) {
			prereq.Root(b)
			prereq.QEMU(b)
			o, mem := agentOptions{}, ""
			if n >= smallGuestsFrom {
				o.TCGCacheMiB, mem = 16, "96Mi"
				if avail, need := memAvailable(), int64(n)*smallGuestBytes+smallGuestsMargin; avail < need {
					// Also on stderr: without -v, go test prints no skip reason for benchmarks.
					fmt.Fprintf(os.Stderr, "BenchmarkCreateToRunning/vmis=%d skipped: %d small guests need ≈%d MiB, %d MiB available\n", n, n, need>>20, avail>>20)
					b.Skipf("%d small guests need ≈%d MiB, %d MiB available", n, need>>20, avail>>20)
				}
			}
			tr := newStartTrace()
			o.Trace = tr.record
			o.Workers = benchWorkers(b)
			// As `vmlet local` runs (--cpu-weights on); VMLET_BENCH_CPU_WEIGHTS=0 measures
			// without, in the same way as before the weights.
			o.CPUWeights = os.Getenv("VMLET_BENCH_CPU_WEIGHTS") != "0" && cpuGroups != nil
			if o.CPUWeights {
				// The agent (this process), the API server and etcd in the system group, as
				// `vmlet local` starts them.
				joinGroup(b, cpuGroups.SystemPath())
			}
			a := startAgent(b, o)
			defer a.stop(b)
			wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
			if err != nil {
				b.Fatal(err)
			}
			var create, pause []time.Duration
			var cpu time.Duration
			var rss int64
			steps := map[string][]time.Duration{}
			for i := 0; i < b.N; i++ {
				c, p, u, r := createRunPauseDelete(b, wc, n, i, mem, tr, steps)
				create, pause = append(create, c...), append(pause, p...)
				cpu, rss = cpu+u, max(rss, r)
			}
			report(b, "create-to-running", create)
			for _, s := range startSteps {
				report(b, "step-"+s, steps[s])
			}
			report(b, "paused-latency", pause)
			for _, s := range pauseSteps {
				report(b, s, steps[s])
			}
			report(b, pauseReconcile, steps[pauseReconcile])
			report(b, pauseQueueWait, steps[pauseQueueWait])
			if r := steps[pauseReconciles]; len(r) > 0 {
				var sum time.Duration
				for _, d := range r {
					sum += d
				}
				b.ReportMetric(float64(sum)/float64(len(r))/float64(time.Millisecond), "pause-reconciles/vmi")
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N)/10, "agent-cpu-ms/s")
			b.ReportMetric(float64(rss)/(1<<20), "agent-rss-MiB")
		})
	}
}

// The pause phase's breakdown (step keys of createRunPauseDelete): the agent's mean reconcile
// time and mean queue wait, and its reconciles per VMI (stored as that many milliseconds).
const (
	pauseReconcile  = "pause-phase-reconcile-mean"
	pauseQueueWait  = "pause-phase-queue-wait-mean"
	pauseReconciles = "pause-phase-reconciles-per-vmi"
)

// createRunPauseDelete runs one round and returns per-VMI latencies, the agent process's CPU
// time over a 10 s steady-state window with all VMIs running, and its RSS.
// guestMem, when set, overrides the guests' memory.
func createRunPauseDelete(b *testing.B, wc client.WithWatch, n, round int, guestMem string, tr *startTrace, steps map[string][]time.Duration) (create, pause []time.Duration, cpu time.Duration, rss int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+time.Duration(n)*6*time.Second)
	defer cancel()
	list := &vmletv1.VirtualMachineInstanceList{}
	w, err := wc.Watch(ctx, list, client.InNamespace("default"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	prefix := fmt.Sprintf("bench-%d-%d-", n, round)
	seen := watchTimes(w, prefix)
	created := map[string]time.Time{}
	ready := map[string]time.Duration{}
	uids := map[string]types.UID{}
	paused := map[string]time.Duration{}
	pausedAt := map[string]time.Time{}
	for i := 0; i < n; i++ {
		v := newVMI(prefix + strconv.Itoa(i))
		if guestMem != "" {
			m := resource.MustParse(guestMem)
			v.Spec.Domain.Memory.Guest = &m
		}
		created[v.Name] = time.Now()
		if err := env.Client.Create(ctx, v); err != nil {
			b.Fatal(err)
		}
		uids[v.Name] = v.UID
		if i < n-1 {
			<-time.After(100 * time.Millisecond) // the scenario's arrival rate, not a wait for state
		}
	}
	readyAt := seen.wait(ctx, b, "Ready", func(s *vmiTimes) map[string]time.Time { return s.ready }, n)
	for name, at := range readyAt {
		ready[name] = at.Sub(created[name])
	}
	cpu, rss = agentUsage(10 * time.Second)
	// After the window: the agent traces its status write once the write returned, which can
	// be after the client saw the status.
	for name, uid := range uids {
		for step, d := range tr.breakdown(uid, created[name], readyAt[name]) {
			steps[step] = append(steps[step], d)
		}
	}
	q0 := readQueueStats(b)
	for name := range created {
		setPausedB(ctx, b, name, true)
		pausedAt[name] = time.Now()
	}
	for name, at := range seen.wait(ctx, b, "Paused", func(s *vmiTimes) map[string]time.Time { return s.paused }, n) {
		paused[name] = at.Sub(pausedAt[name])
	}
	// Where the pauses went: the agent's reconciles in that phase (mean time, how many per
	// VMI) and how long keys waited in its queue.
	workMs, works, waitMs := readQueueStats(b).since(q0)
	for name, uid := range uids {
		for step, d := range tr.pauseBreakdown(uid, pausedAt[name], pausedAt[name].Add(paused[name])) {
			steps[step] = append(steps[step], d)
		}
	}
	steps[pauseReconcile] = append(steps[pauseReconcile], time.Duration(workMs*float64(time.Millisecond)))
	steps[pauseQueueWait] = append(steps[pauseQueueWait], time.Duration(waitMs*float64(time.Millisecond)))
	steps[pauseReconciles] = append(steps[pauseReconciles], time.Duration(float64(works)/float64(n)*float64(time.Millisecond)))
	for name := range created {
		v := &vmletv1.VirtualMachineInstance{}
		v.Namespace, v.Name = "default", name
		if err := env.Client.Delete(ctx, v); err != nil {
			b.Fatal(err)
		}
	}
	seen.wait(ctx, b, "deleted", func(s *vmiTimes) map[string]time.Time { return s.gone }, n)
	for _, d := range ready {
		create = append(create, d)
	}
	for _, d := range paused {
		pause = append(pause, d)
	}
	return create, pause, cpu, rss
}

// vmiTimes records, as the watch delivers them, when each VMI of a round was first seen Ready,
// first seen Paused, and deleted. It reads the watch while the round sends its requests, so
// that a time is when a client could see the change, not when the round's loop (creating VMIs
// 100 ms apart, patching one after another) got round to reading it.
type vmiTimes struct {
	mu                  sync.Mutex
	ready, paused, gone map[string]time.Time
	changed             chan struct{} // a send after every change (buffered, never blocks)
	closed              bool          // the watch ended
}

// watchTimes starts recording the events of w for VMIs whose name starts with prefix, until
// w stops.
func watchTimes(w watch.Interface, prefix string) *vmiTimes {
	s := &vmiTimes{ready: map[string]time.Time{}, paused: map[string]time.Time{}, gone: map[string]time.Time{},
		changed: make(chan struct{}, 1)}
	note := func(m map[string]time.Time, name string, at time.Time) {
		if _, ok := m[name]; !ok {
			m[name] = at
		}
	}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			v, isVMI := ev.Object.(*vmletv1.VirtualMachineInstance)
			if !isVMI || !strings.HasPrefix(v.Name, prefix) {
				continue
			}
			s.mu.Lock()
			switch ev.Type {
			case watch.Deleted:
				note(s.gone, v.Name, at)
			default:
				if meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) {
					note(s.ready, v.Name, at)
				}
				if meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused) {
					note(s.paused, v.Name, at)
				}
			}
			s.mu.Unlock()
			s.kick()
		}
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.kick()
	}()
	return s
}

func (s *vmiTimes) kick() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// wait blocks until which(s) holds n VMIs and returns a copy of it.
func (s *vmiTimes) wait(ctx context.Context, b *testing.B, what string, which func(*vmiTimes) map[string]time.Time, n int) map[string]time.Time {
	for {
		s.mu.Lock()
		m, closed := which(s), s.closed
		have := len(m)
		if have >= n {
			out := maps.Clone(m)
			s.mu.Unlock()
			return out
		}
		s.mu.Unlock()
		if closed {
			b.Fatalf("watch closed before %d VMIs were %s (%d were)", n, what, have)
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			b.Fatalf("%d of %d VMIs %s: %v", have, n, what, ctx.Err())
		}
	}
}

func waitAll(ctx context.Context, b *testing.B, w watch.Interface, prefix string, done func(*vmletv1.VirtualMachineInstance) bool) {
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("watch closed")
			}
			if v, isVMI := ev.Object.(*vmletv1.VirtualMachineInstance); isVMI && strings.HasPrefix(v.Name, prefix) && done(v) {
				return
			}
		case <-ctx.Done():
			b.Fatalf("condition not reached: %v", ctx.Err())
		}
	}
}

func setPausedB(ctx context.Context, b *testing.B, name string, p bool) {
	v := &vmletv1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	v.Spec.Paused = p
	if err := env.Client.Patch(ctx, v, patch); err != nil {
		b.Fatal(err)
	}
}

// agentUsage measures this process's (the agent's) CPU time over window and its RSS.
func agentUsage(window time.Duration) (time.Duration, int64) {
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	<-time.After(window) // the measured steady-state window
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	return cpu, rssBytes()
}

// smallGuestsFrom is the VMI count from which the benchmark uses small guests, smallGuestBytes
// what one of them costs the host (QEMU ≈171 MB RSS per NOTES.md, plus its launcher's PSS), and
// smallGuestsMargin what must stay free besides.
const (
	smallGuestsFrom   = 50
	smallGuestBytes   = 180 << 20
	smallGuestsMargin = 1 << 30
)

// benchWorkers parses VMLET_BENCH_WORKERS, the agent's reconcile workers (unset: its
// default), to choose that default by measurement.
func benchWorkers(b *testing.B) int {
	v := os.Getenv("VMLET_BENCH_WORKERS")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("VMLET_BENCH_WORKERS=%q is not a positive count", v)
	}
	return n
}

// benchVMIs parses VMLET_BENCH_VMIS ("1,20,100"); unset means 1 and 20.
func benchVMIs(b *testing.B) []int {
	v := os.Getenv("VMLET_BENCH_VMIS")
	if v == "" {
		return []int{1, 20}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("VMLET_BENCH_VMIS=%q: %q is not a positive count", v, f)
		}
		out = append(out, n)
	}
	return out
}

// memAvailable is MemAvailable from /proc/meminfo in bytes (0 if unreadable).
func memAvailable() int64 { return procKiB("/proc/meminfo", "MemAvailable:") }

func rssBytes() int64 { return procKiB("/proc/self/status", "VmRSS:") }

// procKiB reads the "key: N kB" line of a /proc file, in bytes (0 if absent).
func procKiB(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func report(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	pct := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1)+0.5)] }
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(pct(0.95).Microseconds())/1000, name+"-p95-ms")
}

// startTrace collects the agent's start-up steps of each VMI (VMIReconciler.Trace).
type startTrace struct {
	mu    sync.Mutex
	steps map[types.UID]map[string][2]time.Time // the first occurrence of each step
}

func newStartTrace() *startTrace {
	return &startTrace{steps: map[types.UID]map[string][2]time.Time{}}
}

func (t *startTrace) record(uid types.UID, step string, start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.steps[uid]
	if m == nil {
		m = map[string][2]time.Time{}
		t.steps[uid] = m
	}
	if _, ok := m[step]; !ok {
		m[step] = [2]time.Time{start, end}
	}
}

// pauseSteps are the parts of spec.paused → Paused that pauseBreakdown returns; they add up
// to it.
var pauseSteps = []string{"pause-api-to-rpc", "pause-rpc", "pause-rpc-to-write", "pause-status-write", "pause-agent-to-client"}

// pauseBreakdown splits one VMI's spec.paused (the patch returned at asked) → Paused (the
// client saw it at seen): the API server's watch delivering the change, the key's wait in the
// agent's queue and the pass up to the launcher's Pause (observation, Sync), the Pause itself
// (QMP stop), from its end to the status write (the wake-up and the pass that reports it), the
// status write, the watch delivering it to the client. nil when the agent traced no pause.
func (t *startTrace) pauseBreakdown(uid types.UID, asked, seen time.Time) map[string]time.Duration {
	t.mu.Lock()
	m := t.steps[uid]
	t.mu.Unlock()
	for _, s := range []string{controllers.TracePause, controllers.TraceStatusPaused} {
		if _, ok := m[s]; !ok {
			return nil
		}
	}
	rpc, write := m[controllers.TracePause], m[controllers.TraceStatusPaused]
	return map[string]time.Duration{
		"pause-api-to-rpc":      rpc[0].Sub(asked),
		"pause-rpc":             rpc[1].Sub(rpc[0]),
		"pause-rpc-to-write":    write[0].Sub(rpc[1]),
		"pause-status-write":    write[1].Sub(write[0]),
		"pause-agent-to-client": seen.Sub(write[1]),
	}
}

// startSteps are the parts of create → Ready that breakdown returns; they add up to it.
var startSteps = []string{"api-to-agent", "translate", "storage", "launcher-exec", "launcher-to-ready",
	"network", "qemu-start", "status-write", "agent-to-client", "between-steps"}

// breakdown splits one VMI's create → Ready (as the client saw it) into the agent's steps:
// the API server's watch delivering the VMI to the agent, the translation, the storage
// operation, the launcher's exec and the wait until it is ready (its socket renamed, the
// wake-up, the dial), the pod network, QEMU's start (Sync), the status write, the watch
// delivering the status to the client; the rest (passes waiting in the queue, reads) is
// between-steps.
func (t *startTrace) breakdown(uid types.UID, created, ready time.Time) map[string]time.Duration {
	t.mu.Lock()
	m := t.steps[uid]
	t.mu.Unlock()
	dur := func(s string) time.Duration { return m[s][1].Sub(m[s][0]) }
	at := func(s string) time.Time { return m[s][0] }
	for _, s := range []string{controllers.TraceFirstReconcile, controllers.TraceTranslate, controllers.TraceStorage,
		controllers.TraceLauncherExec, controllers.TraceLauncherReady, controllers.TraceNetwork,
		controllers.TraceQEMUStart, controllers.TraceStatusRunning} {
		if _, ok := m[s]; !ok {
			return nil // not a start from scratch (e.g. adopted): no breakdown
		}
	}
	out := map[string]time.Duration{
		"api-to-agent":      at(controllers.TraceFirstReconcile).Sub(created),
		"translate":         dur(controllers.TraceTranslate),
		"storage":           dur(controllers.TraceStorage),
		"launcher-exec":     dur(controllers.TraceLauncherExec),
		"launcher-to-ready": at(controllers.TraceLauncherReady).Sub(m[controllers.TraceLauncherExec][1]),
		"network":           dur(controllers.TraceNetwork),
		"qemu-start":        dur(controllers.TraceQEMUStart),
		"status-write":      dur(controllers.TraceStatusRunning),
		"agent-to-client":   ready.Sub(m[controllers.TraceStatusRunning][1]),
	}
	var sum time.Duration
	for _, d := range out {
		sum += d
	}
	out["between-steps"] = ready.Sub(created) - sum
	return out
}
