package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/test/prereq"
)

// cpuHierarchy is a fresh cpu-controller hierarchy for one test (a v1 cpu folder on hybrid
// hosts; on v2 the runtime's cgroup parent itself), removed with it.
func cpuHierarchy(t *testing.T, r *Runtime) *cpuweight.Hierarchy {
	t.Helper()
	h, err := cpuweight.Find(filepath.Base(r.CgroupParent))
	if errors.Is(err, cpuweight.ErrNoCPUController) {
		prereq.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Setup(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Teardown(); err != nil {
			t.Error(err)
		}
	})
	return h
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ids(t *testing.T, path string) []int {
	t.Helper()
	var out []int
	for f := range strings.FieldsSeq(readFile(t, path)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func tasksOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestCPUWeights: with CPU weights the launcher runs in the launchers group and its VM's CPU
// group has the kubelet's shares for its request; placing "QEMU" (here the fake launcher
// stands in for it) moves it into the VM's group and a thread placed as a vCPU into the vcpus
// child; foreign processes and threads are refused; Remove leaves no CPU group behind.
func TestCPUWeights(t *testing.T) {
	r, _ := newRuntime(t)
	r.CPU = cpuHierarchy(t, r)
	if r.CPU.Version != cpuweight.V1 {
		prereq.Missing(t, "a cgroup-v1 cpu hierarchy (this test checks v1 groups; hosts here are v1 hybrids)")
	}
	id := "0f4c6a2e-1111-4e7e-9d51-000000000011"
	s := spec(id)
	s.CPUMilli = 250
	st, err := r.Ensure(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Remove(context.Background(), id) })
	waitState(t, r, id, func(s State) bool { return s.Ready })
	vm := r.CPU.VM("vmlet-" + id)
	if got := readFile(t, filepath.Join(vm.Path, "cpu.shares")); got != "256" {
		t.Errorf("vm cpu.shares = %s, want 256 (250m)", got)
	}
	if got := readFile(t, filepath.Join(vm.VCPUPath(), "cpu.shares")); got != "2" {
		t.Errorf("vcpus cpu.shares = %s, want 2", got)
	}
	if got := ids(t, filepath.Join(r.CPU.LauncherPath(), "cgroup.procs")); !slices.Equal(got, []int{st.Pid}) {
		t.Fatalf("launchers group procs %v, want the launcher %d", got, st.Pid)
	}
	if err := r.PlaceVCPUs(id, os.Getpid(), nil); !errors.Is(err, ErrForeignProcess) {
		t.Errorf("placing the agent as QEMU: %v, want ErrForeignProcess", err)
	}
	if placed, err := r.VCPUsPlaced(id); err != nil || placed {
		t.Fatalf("VCPUsPlaced before placing = %v, %v", placed, err)
	}
	all := tasksOf(t, st.Pid)
	vcpu := all[len(all)-1] // a stand-in for a vCPU thread
	if err := r.PlaceVCPUs(id, st.Pid, []int{vcpu}); err != nil {
		t.Fatal(err)
	}
	if placed, err := r.VCPUsPlaced(id); err != nil || !placed {
		t.Fatalf("VCPUsPlaced after placing = %v, %v", placed, err)
	}
	if got := ids(t, filepath.Join(vm.VCPUPath(), "tasks")); !slices.Equal(got, []int{vcpu}) {
		t.Errorf("vcpus tasks %v, want [%d]", got, vcpu)
	}
	// The other threads stay (the Go runtime may have started more since: they are born in
	// the VM's group too).
	rest := ids(t, filepath.Join(vm.Path, "tasks"))
	for _, tid := range all[:len(all)-1] {
		if !slices.Contains(rest, tid) {
			t.Errorf("thread %d not in the vm group %v", tid, rest)
		}
	}
	if slices.Contains(rest, vcpu) {
		t.Errorf("the vcpu thread %d is still in the vm group", vcpu)
	}
	if err := r.PlaceVCPUs(id, st.Pid, []int{unix.Gettid()}); !errors.Is(err, cpuweight.ErrForeignThread) {
		t.Errorf("placing the agent's own thread: %v, want ErrForeignThread", err)
	}
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
	if _, err := os.Stat(vm.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cpu group left behind: %v", err)
	}
}

// TestCPUAdopt: a launcher started without CPU weights gets its CPU group from the first
// Ensure of a runtime that has them (an agent upgraded and restarted).
func TestCPUAdopt(t *testing.T) {
	r, _ := newRuntime(t)
	h := cpuHierarchy(t, r)
	if h.Version != cpuweight.V1 {
		prereq.Missing(t, "a cgroup-v1 cpu hierarchy (this test checks v1 groups; hosts here are v1 hybrids)")
	}
	id := "0f4c6a2e-1111-4e7e-9d51-000000000012"
	st, err := r.Ensure(context.Background(), spec(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Remove(context.Background(), id) })
	waitState(t, r, id, func(s State) bool { return s.Ready })
	restarted := &Runtime{Binary: r.Binary, RunRoot: r.RunRoot, CgroupParent: r.CgroupParent, CPU: h}
	s := spec(id)
	s.CPUMilli = 1000
	if _, err := restarted.Ensure(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	vm := h.VM("vmlet-" + id)
	if got := ids(t, filepath.Join(h.LauncherPath(), "cgroup.procs")); !slices.Equal(got, []int{st.Pid}) {
		t.Fatalf("launchers group procs %v, want the adopted launcher %d", got, st.Pid)
	}
	if got := readFile(t, filepath.Join(vm.Path, "cpu.shares")); got != "1024" {
		t.Errorf("vm cpu.shares = %s, want 1024", got)
	}
	if err := restarted.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vm.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cpu group left behind: %v", err)
	}
}
