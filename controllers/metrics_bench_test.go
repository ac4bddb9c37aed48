package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/test/prereq"
)

// scrapeVMIs is how many running VMIs BenchmarkScrape scrapes (issue 18's budget: one scrape of
// 20 VMIs under 50 ms of agent CPU).
const scrapeVMIs = 20

// processCPU is this process's (the agent's) user+system CPU time.
func processCPU() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkScrape measures one /metrics gather of controller-runtime's registry (what the
// agent's metrics server serves: the VMI collector and the controller-runtime defaults) with
// 20 running VMIs, each with a masquerade NIC and an empty disk: the agent process's CPU time
// per scrape (getrusage around Gather, so its other goroutines' work in that time counts too),
// the scrape's wall time and its series; and the launchers' CPU time per scrape for their
// DomainStats answers (their processes' /proc/<pid>/stat, 10 ms ticks; QEMU's share of the QMP
// queries is not counted). Each iteration is 10 scrapes.
func BenchmarkScrape(b *testing.B) {
	prereq.Root(b)
	prereq.QEMU(b)
	if avail, need := memAvailable(), int64(scrapeVMIs)*smallGuestBytes+smallGuestsMargin; avail < need {
		fmt.Fprintf(os.Stderr, "BenchmarkScrape skipped: %d small guests need ≈%d MiB, %d MiB available\n", scrapeVMIs, need>>20, avail>>20)
		b.Skipf("%d small guests need ≈%d MiB, %d MiB available", scrapeVMIs, need>>20, avail>>20)
	}
	a := startAgent(b, agentOptions{TCGCacheMiB: 16})
	defer a.stop(b)
	col := vmimetrics.New(vmimetrics.Source{Node: testNode, VMIs: a.r.Client, Launchers: a.r,
		Overhead: vmimetrics.BudgetedOverhead(false, 16)})
	if err := ctrlmetrics.Registry.Register(col); err != nil {
		b.Fatal(err)
	}
	defer ctrlmetrics.Registry.Unregister(col)
	names := runScrapeVMIs(b)
	defer deleteScrapeVMIs(b, names)

	pids := launcherPids(b, a, names)
	var cpu, wall time.Duration
	var worst time.Duration
	series, scrapes := 0, 0
	l0 := ticks(b, pids)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < 10; j++ {
			c0, t0 := processCPU(), time.Now()
			mfs, err := ctrlmetrics.Registry.Gather()
			d, w := processCPU()-c0, time.Since(t0)
			if err != nil {
				b.Fatalf("gather: %v", err)
			}
			cpu, wall, worst, scrapes = cpu+d, wall+w, max(worst, d), scrapes+1
			series = 0
			vmis := 0
			for _, mf := range mfs {
				series += len(mf.GetMetric())
				if mf.GetName() == "kubevirt_vmi_cpu_usage_seconds_total" {
					vmis = len(mf.GetMetric())
				}
			}
			if vmis != scrapeVMIs {
				b.Fatalf("a scrape had the CPU series of %d VMIs, want %d", vmis, scrapeVMIs)
			}
		}
	}
	b.StopTimer()
	launchers := ticks(b, pids) - l0
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(scrapes), "agent-cpu-ms/scrape")
	b.ReportMetric(float64(launchers.Microseconds())/1000/float64(scrapes), "launchers-cpu-ms/scrape")
	b.ReportMetric(float64(worst.Microseconds())/1000, "agent-cpu-ms/scrape-max")
	b.ReportMetric(float64(wall.Microseconds())/1000/float64(scrapes), "wall-ms/scrape")
	b.ReportMetric(float64(series), "series/scrape")
}

// launcherPids are the pids of the VMIs' launcher processes.
func launcherPids(b *testing.B, a *agent, names []string) []int {
	var pids []int
	for _, n := range names {
		v := &vmletv1.VirtualMachineInstance{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: n}, v); err != nil {
			b.Fatal(err)
		}
		st, err := a.runtime.State(string(v.UID))
		if err != nil || st.Pid == 0 {
			b.Fatalf("launcher of %s: %v %+v", n, err, st)
		}
		pids = append(pids, st.Pid)
	}
	return pids
}

// ticks sums the processes' user+system CPU time (/proc/<pid>/stat, USER_HZ = 100 ticks/s).
func ticks(b *testing.B, pids []int) time.Duration {
	var sum time.Duration
	for _, p := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		k, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			b.Fatalf("stat of %d: %q", p, st)
		}
		sum += time.Duration(u+k) * 10 * time.Millisecond
	}
	return sum
}

// runScrapeVMIs creates the benchmark's VMIs (small guests, masquerade NIC, 8 MiB empty disk)
// and waits until all are Ready.
func runScrapeVMIs(b *testing.B) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &vmletv1.VirtualMachineInstanceList{}, client.InNamespace("default"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var names []string
	for i := 0; i < scrapeVMIs; i++ {
		v := masqueradeVMI("scrape-" + strconv.Itoa(i))
		m := resource.MustParse("96Mi")
		v.Spec.Domain.Memory.Guest = &m
		v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: "scratch",
			VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("8Mi")}}})
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: "scratch"})
		if err := env.Client.Create(ctx, v); err != nil {
			b.Fatal(err)
		}
		names = append(names, v.Name)
	}
	ready := map[string]bool{}
	waitAll(ctx, b, w, "scrape-", func(v *vmletv1.VirtualMachineInstance) bool {
		if meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) {
			ready[v.Name] = true
		}
		return len(ready) == scrapeVMIs
	})
	return names
}

// deleteScrapeVMIs deletes the VMIs and waits until they are gone.
func deleteScrapeVMIs(b *testing.B, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &vmletv1.VirtualMachineInstanceList{}, client.InNamespace("default"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	for _, n := range names {
		v := &vmletv1.VirtualMachineInstance{}
		v.Namespace, v.Name = "default", n
		if err := env.Client.Delete(ctx, v); err != nil {
			b.Fatal(err)
		}
	}
	for gone := 0; gone < len(names); {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("watch closed")
			}
			if v, isVMI := ev.Object.(*vmletv1.VirtualMachineInstance); isVMI && ev.Type == watch.Deleted && strings.HasPrefix(v.Name, "scrape-") {
				gone++
			}
		case <-ctx.Done():
			b.Fatalf("VMIs not deleted: %v", ctx.Err())
		}
	}
}
