package cpuweight

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/prereq"
)

const helperEnv = "VMLET_CPUWEIGHT_TEST_THREADS"

// TestMain lets the test binary be a process with a few extra threads (stand-ins for vCPUs).
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		// Each goroutine wired to its own thread says so; "ready" once all threads exist.
		var started sync.WaitGroup
		for range 3 {
			started.Add(1)
			go func() {
				runtime.LockOSThread()
				started.Done()
				for { // hold the thread (in pause(2), again after each signal) until the test kills us
					_ = unix.Pause()
				}
			}()
		}
		started.Wait()
		fmt.Println("ready")
		for {
			_ = unix.Pause()
		}
	}
	os.Exit(m.Run())
}

// testHierarchy finds the cpu controller and returns a fresh hierarchy under it, removed with
// the test.
func testHierarchy(t *testing.T) *Hierarchy {
	t.Helper()
	prereq.Root(t)
	name := fmt.Sprintf("vmlet-cpuweight-test-%d", os.Getpid())
	h, err := Find(name)
	if errors.Is(err, ErrNoCPUController) {
		prereq.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Teardown(); err != nil {
			t.Error(err)
		}
	})
	return h
}

func readValue(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// weightFile and want are the file and value a plan's shares give on this hierarchy.
func weightFile(h *Hierarchy, shares uint64) (string, string) {
	if h.Version == V2 {
		return "cpu.weight", strconv.FormatUint(SharesToWeight(shares), 10)
	}
	return "cpu.shares", strconv.FormatUint(shares, 10)
}

// startThreads starts the helper (a process with extra threads) and returns it.
func startThreads(t *testing.T) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	return cmd
}

func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		id, _ := strconv.Atoi(e.Name())
		tids = append(tids, id)
	}
	slices.Sort(tids)
	return tids
}

func sorted(ids []int, err error) []int {
	if err != nil {
		return []int{-1}
	}
	slices.Sort(ids)
	return ids
}

// TestVMGroups runs the whole life of one VM's groups on the real cpu controller: weights
// written as planned, the process moved in, two of its threads placed in vcpus and the rest
// left in the VM's group, a foreign thread refused, and nothing left after Remove.
func TestVMGroups(t *testing.T) {
	h := testHierarchy(t)
	if err := h.Setup(); err != nil {
		t.Fatal(err)
	}
	if err := h.Setup(); err != nil { // idempotent
		t.Fatal(err)
	}
	f, want := weightFile(h, NodeShares())
	if got := readValue(t, filepath.Join(h.Root, f)); got != want {
		t.Errorf("root %s = %s, want %s (%d CPUs)", f, got, want, runtime.NumCPU())
	}
	f, want = weightFile(h, SystemShares)
	if got := readValue(t, filepath.Join(h.SystemPath(), f)); got != want {
		t.Errorf("system %s = %s, want %s", f, got, want)
	}
	if h.Version == V2 {
		prereq.Missing(t, "a cgroup-v1 cpu hierarchy (on v2 the VM group is the launcher's jail, and nothing checks it yet)")
	}
	if f, want := weightFile(h, LauncherShares); readValue(t, filepath.Join(h.LauncherPath(), f)) != want {
		t.Errorf("launchers %s = %s, want %s", f, readValue(t, filepath.Join(h.LauncherPath(), f)), want)
	}
	vm := h.VM("vmlet-0f4c6a2e")
	plan := PlanVM(400)
	if err := vm.Create(plan); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.Remove(context.Background()) })
	if err := vm.Create(plan); err != nil { // idempotent
		t.Fatal(err)
	}
	if f, want := weightFile(h, plan.Shares); readValue(t, filepath.Join(vm.Path, f)) != want || want != "409" {
		t.Errorf("vm %s = %s, want %s (409)", f, readValue(t, filepath.Join(vm.Path, f)), want)
	}
	if f, want := weightFile(h, plan.VCPUShares); readValue(t, filepath.Join(vm.VCPUPath(), f)) != want {
		t.Errorf("vcpus %s = %s, want %s", f, readValue(t, filepath.Join(vm.VCPUPath(), f)), want)
	}

	cmd := startThreads(t)
	pid := cmd.Process.Pid
	if err := vm.AddProcess(pid); err != nil {
		t.Fatal(err)
	}
	all := threadsOf(t, pid)
	if got := sorted(vm.Threads()); !slices.Equal(got, all) {
		t.Fatalf("vm group threads %v, want all of the process's %v", got, all)
	}
	vcpus := all[len(all)-2:]
	if err := vm.PlaceVCPUs(vcpus); err != nil {
		t.Fatal(err)
	}
	if err := vm.PlaceVCPUs(vcpus); err != nil { // already placed: nothing to do
		t.Fatal(err)
	}
	if got := sorted(vm.VCPUThreads()); !slices.Equal(got, vcpus) {
		t.Errorf("vcpus group %v, want %v", got, vcpus)
	}
	if got := sorted(vm.Threads()); !slices.Equal(got, all[:len(all)-2]) {
		t.Errorf("vm group %v, want %v", got, all[:len(all)-2])
	}
	// A thread that is not the VM's (here: the test's own) is refused, and nothing moves.
	if err := vm.PlaceVCPUs([]int{all[0], unix.Gettid()}); !errors.Is(err, ErrForeignThread) {
		t.Errorf("placing a foreign thread: %v, want ErrForeignThread", err)
	}
	if got := sorted(vm.VCPUThreads()); !slices.Equal(got, vcpus) {
		t.Errorf("after a refused placement: vcpus group %v, want %v", got, vcpus)
	}

	// A launcher joins the launchers group; the threads it had elsewhere follow it.
	if err := h.AddLauncher(pid); err != nil {
		t.Fatal(err)
	}
	if got, err := readIDs(filepath.Join(h.LauncherPath(), "tasks")); err != nil || !slices.Equal(sorted(got, nil), all) {
		t.Errorf("launchers group %v (%v), want %v", got, err, all)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := vm.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.Remove(ctx); err != nil { // gone: not an error
		t.Fatal(err)
	}
	if _, err := os.Stat(vm.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("vm group left behind: %v", err)
	}
}

// TestRemoveBusy: a group whose tasks live on is not removed; the error says so.
func TestRemoveBusy(t *testing.T) {
	h := testHierarchy(t)
	if err := h.Setup(); err != nil {
		t.Fatal(err)
	}
	if h.Version == V2 {
		prereq.Missing(t, "a cgroup-v1 cpu hierarchy (on v2 VM groups go with the jail, and nothing checks it yet)")
	}
	vm := h.VM("vmlet-busy")
	if err := vm.Create(PlanVM(100)); err != nil {
		t.Fatal(err)
	}
	cmd := startThreads(t)
	if err := vm.AddProcess(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := vm.Remove(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("Remove with a live task: %v, want ErrBusy", err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := vm.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLeaveSystem: a process in the system group keeps Teardown from removing it; once it
// left (into the hierarchy's root group, all its threads) Teardown removes every node-level
// group, as local mode's graceful shutdown does.
func TestLeaveSystem(t *testing.T) {
	h := testHierarchy(t)
	if err := h.Setup(); err != nil {
		t.Fatal(err)
	}
	cmd := startThreads(t)
	pid := cmd.Process.Pid
	if err := h.JoinSystem(pid); err != nil {
		t.Fatal(err)
	}
	if err := h.Teardown(); err == nil {
		t.Fatal("Teardown removed the system group with a process in it")
	}
	if err := h.LeaveSystem(pid); err != nil {
		t.Fatal(err)
	}
	if got := readValue(t, filepath.Join(h.SystemPath(), "cgroup.procs")); got != "" {
		t.Errorf("system group after LeaveSystem holds %q", got)
	}
	if !slices.Contains(strings.Fields(readValue(t, filepath.Join(h.Mount, "cgroup.procs"))), strconv.Itoa(pid)) {
		t.Errorf("process %d not in the root group %s", pid, h.Mount)
	}
	if err := h.Teardown(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{h.SystemPath(), h.LauncherPath()} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Teardown: %v", d, err)
		}
	}
}
