package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// spinners is how many 2-vCPU guests spin both vCPUs during BenchmarkControlPlaneUnderGuestLoad
// (VMLET_BENCH_SPINNERS overrides): 4 × 2 busy vCPU threads on these 2-core machines.
const spinners = 4

// spin is what each spinner guest runs, through its guest agent: one busy loop per vCPU.
const spin = "for i in 1 2; do (while :; do :; done) </dev/null >/dev/null 2>&1 & done"

// BenchmarkControlPlaneUnderGuestLoad measures the control plane while guests spin every vCPU,
// with CPU weights off and on in the same run. Both runs take place inside vmlet's root CPU
// group (cpuweight.NodeShares), so that they get the same share of a host shared with other
// work: "flat" puts the agent (this process), the API server, etcd, the launchers and QEMU
// together in it with no weights below, as `vmlet local --cpu-weights=false` on a dedicated
// node; "weights" is `vmlet local`: the agent, the API server and etcd in the system group,
// each VM in its weighted group with its vCPUs below.
//
//	launcher-rtt        GetDomain round trips to a spinning guest's launcher, 20 ms apart
//	create-to-running   one more VMI's creation → Ready=True (launcher, QEMU, guest boot)
//	paused-latency      spec.paused on a spinning guest → Paused condition
//
// Not a pass/fail test: the numbers are for BENCHMARKS.md (make bench).
func BenchmarkControlPlaneUnderGuestLoad(b *testing.B) {
	n := spinners
	if v, err := strconv.Atoi(os.Getenv("VMLET_BENCH_SPINNERS")); err == nil && v > 0 {
		n = v
	}
	for _, weights := range []bool{false, true} {
		name := map[bool]string{false: "flat", true: "weights"}[weights]
		b.Run(name, func(b *testing.B) {
			prereq.Root(b)
			prereq.QEMU(b)
			testguest.Assets(b)
			if cpuGroups == nil {
				prereq.Missing(b, "no cgroup cpu controller")
			}
			group := cpuGroups.Root // flat: launchers and QEMU are born here too
			if weights {
				group = cpuGroups.SystemPath()
			}
			joinGroup(b, group)
			a := startAgent(b, agentOptions{CPUWeights: weights})
			defer a.stop(b)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
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
			prefix := "spin-" + name + "-"
			var names []string
			for i := range n {
				v := newVMI(prefix + strconv.Itoa(i))
				v.Spec.Domain.CPU = &vmletv1.CPU{Cores: 2}
				if err := env.Client.Create(ctx, v); err != nil {
					b.Fatal(err)
				}
				names = append(names, v.Name)
			}
			defer deleteAll(ctx, b, w, names)
			ready := map[string]*vmletv1.VirtualMachineInstance{}
			waitAll(ctx, b, w, prefix, func(v *vmletv1.VirtualMachineInstance) bool {
				// The spinners start through the guest agent.
				if meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
					meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected) {
					ready[v.Name] = v
				}
				return len(ready) == n
			})
			var first *launcher.Client
			for i, name := range names {
				waitSerialB(ctx, b, consoleLog(ready[name]), testguest.MarkerReady)
				c, err := launcher.Dial(ctx, a.runtime.Socket(string(ready[name].UID)))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", spin}, nil, time.Minute); err != nil || r.GetExitCode() != 0 {
					b.Fatalf("%s: start the spinners: %v %v", name, r, err)
				}
				if i == 0 {
					first = c
				}
			}
			<-time.After(2 * time.Second) // the spinners run; the scheduler has seen them

			var rtt, create, pause []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for range 100 {
					start := time.Now()
					if _, err := first.GetDomain(ctx); err != nil {
						b.Fatal(err)
					}
					rtt = append(rtt, time.Since(start))
					<-time.After(20 * time.Millisecond) // the launcher sleeps between calls, as between reconciles
				}
				probe := newVMI(fmt.Sprintf("%sprobe-%d", prefix, i))
				start := time.Now()
				if err := env.Client.Create(ctx, probe); err != nil {
					b.Fatal(err)
				}
				waitAll(ctx, b, w, probe.Name, func(v *vmletv1.VirtualMachineInstance) bool {
					return v.Name == probe.Name && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
				})
				create = append(create, time.Since(start))
				deleteAll(ctx, b, w, []string{probe.Name})
				for _, p := range []bool{true, false} {
					start := time.Now()
					setPausedB(ctx, b, names[0], p)
					waitAll(ctx, b, w, names[0], func(v *vmletv1.VirtualMachineInstance) bool {
						return v.Name == names[0] && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused) == p
					})
					pause = append(pause, time.Since(start))
				}
			}
			b.StopTimer()
			report(b, "launcher-rtt", rtt)
			report(b, "create-to-running", create)
			report(b, "paused-latency", pause)
		})
	}
}

// joinGroup moves this process (the test agent), and the API server and etcd it started, into
// the cgroup dir of cpuGroups for the benchmark, and back to the hierarchy's root afterwards.
func joinGroup(b *testing.B, dir string) {
	pids := append([]int{os.Getpid()}, childrenNamed("etcd", "kube-apiserver")...)
	for _, p := range pids {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p)), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, p := range pids {
			_ = os.WriteFile(filepath.Join(filepath.Dir(cpuGroups.Root), "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
		}
	})
}

// childrenNamed are this process's children whose command name is one of names.
func childrenNamed(names ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		for _, n := range names {
			if s[i+1:j] == n {
				out = append(out, pid)
			}
		}
	}
	return out
}

func deleteAll(ctx context.Context, b *testing.B, w watch.Interface, names []string) {
	left := map[string]bool{}
	for _, name := range names {
		v := &vmletv1.VirtualMachineInstance{}
		v.Namespace, v.Name = "default", name
		if err := env.Client.Delete(ctx, v); err != nil {
			b.Fatal(err)
		}
		left[name] = true
	}
	for len(left) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("watch closed")
			}
			if v, isVMI := ev.Object.(*vmletv1.VirtualMachineInstance); isVMI && ev.Type == watch.Deleted {
				delete(left, v.Name)
			}
		case <-ctx.Done():
			b.Fatalf("VMIs not deleted: %v", ctx.Err())
		}
	}
}

// waitSerialB waits for marker on a guest console log.
func waitSerialB(ctx context.Context, b *testing.B, path, marker string) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), marker) {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: no %s: %v", path, marker, ctx.Err())
		case <-t.C:
		}
	}
}
