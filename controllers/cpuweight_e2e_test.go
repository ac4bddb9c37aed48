package controllers_test

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
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestVCPUThreadsInTheirGroup runs a 2-vCPU VMI requesting 300m with CPU weights on, as local
// mode runs it: its CPU group has the kubelet's shares for 300m, QEMU's vCPU threads (as QMP
// query-cpus-fast names them) are exactly the vcpus group's, every other thread of QEMU is in
// the VM's group (v1: the launcher's in the launchers group; v2: in the VM's group, its jail),
// and after the delete no CPU group of the VM is left.
func TestVCPUThreadsInTheirGroup(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{CPUWeights: true})
	defer a.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	vmi := newVMI("vcpu-groups")
	vmi.Spec.Domain.CPU = &vmletv1.CPU{Cores: 2}
	vmi.Spec.Domain.Resources.Requests = vmletv1.ResourceList{vmletv1.ResourceCPU: resource.MustParse("300m")}
	// Its vCPUs get the least CPU share there is: on a busy machine (make test runs packages side
	// by side on 2 cores) the guest may take minutes to boot, by design. Nothing here needs it
	// booted (QEMU makes its vCPU threads at start), and its delete need not wait for an ACPI
	// shutdown it may be too slow to hear.
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	st, err := a.runtime.State(uid)
	if err != nil {
		t.Fatal(err)
	}
	launcherPid, qemuPid := st.Pid, int(running.Status.Launcher.PID)
	vm := cpuGroups.VM("vmlet-" + uid)

	c, err := launcher.Dial(ctx, a.runtime.Socket(uid))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stats, err := c.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var vcpus []int
	for _, v := range stats.GetVcpus() {
		vcpus = append(vcpus, int(v.GetThreadId()))
	}
	slices.Sort(vcpus)
	if len(vcpus) != 2 {
		t.Fatalf("query-cpus-fast threads %v, want 2", vcpus)
	}
	eventually(t, 30*time.Second, "vCPU threads placed", func() (bool, string) {
		got, err := vm.VCPUThreads()
		slices.Sort(got)
		return err == nil && slices.Equal(got, vcpus), fmt.Sprintf("vcpus group %v (%v), want %v", got, err, vcpus)
	})
	rest, err := vm.Threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range threads(t, qemuPid) {
		if !slices.Contains(vcpus, tid) && !slices.Contains(rest, tid) {
			t.Errorf("QEMU thread %d (%s) is in neither the VM's group nor vcpus", tid, comm(qemuPid, tid))
		}
	}
	launchers := rest // v2: the launcher stays in its jail, the VM's group
	if cpuGroups.Version == cpuweight.V1 {
		b, err := os.ReadFile(filepath.Join(cpuGroups.LauncherPath(), "tasks"))
		if err != nil {
			t.Fatal(err)
		}
		launchers = nil
		for f := range strings.FieldsSeq(string(b)) {
			n, _ := strconv.Atoi(f)
			launchers = append(launchers, n)
		}
	}
	for _, tid := range threads(t, launcherPid) {
		if !slices.Contains(launchers, tid) {
			t.Errorf("launcher thread %d (%s) is not in the launchers group", tid, comm(launcherPid, tid))
		}
	}
	for _, tid := range vcpus {
		if name := comm(qemuPid, tid); !strings.HasPrefix(name, "CPU ") {
			t.Errorf("vcpus group holds thread %d named %q, not a vCPU", tid, name)
		}
	}
	// 300m: 300*1024/1000 = 307 shares (v2: weight 12); vcpus the minimum.
	for dir, shares := range map[string]uint64{vm.Path: 307, vm.VCPUPath(): cpuweight.VCPUShares} {
		f, v := "cpu.shares", strconv.FormatUint(shares, 10)
		if cpuGroups.Version == cpuweight.V2 {
			f, v = "cpu.weight", strconv.FormatUint(cpuweight.SharesToWeight(shares), 10)
		}
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || strings.TrimSpace(string(b)) != v {
			t.Errorf("%s/%s = %q, %v; want %s", dir, f, b, err, v)
		}
	}
	t.Logf("vcpus %v in %s; QEMU %d's other threads in %s; launcher %d in %s", vcpus, vm.VCPUPath(), qemuPid, vm.Path, launcherPid, cpuGroups.LauncherPath())

	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, uid, launcherPid, qemuPid)
	if _, err := os.Stat(vm.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VM cpu group %s left behind: %v", vm.Path, err)
	}
}

func threads(t *testing.T, pid int) []int {
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
	return out
}

func comm(pid, tid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	return strings.TrimSpace(string(b))
}
