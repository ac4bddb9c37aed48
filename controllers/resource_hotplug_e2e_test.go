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
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// hotplugManifest is the smallest kernel-boot VMI the API accepts (min-kernelboot) plus
// cpu.maxSockets and memory.maxGuest.
const hotplugManifest = `
spec:
  domain:
    cpu: {maxSockets: 3}
    memory: {guest: 256Mi, maxGuest: 768Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet panic=-1
        container: {image: ` + guestImage + `, kernelPath: /vmlinuz, initrdPath: /initramfs.gz}
    devices: {}`

// createManifest creates a VMI from raw YAML, as kubectl apply sends it.
func createManifest(t testing.TB, name, manifest string) client.ObjectKey {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetAPIVersion(vmletv1.GroupVersion.String())
	u.SetKind("VirtualMachineInstance")
	u.SetNamespace("default")
	u.SetName(name)
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return client.ObjectKeyFromObject(u)
}

// mergePatch sends a JSON merge patch to the VMI, as `kubectl patch --type merge -p` does.
func mergePatch(key client.ObjectKey, patch string) error {
	v := &vmletv1.VirtualMachineInstance{}
	v.Namespace, v.Name = key.Namespace, key.Name
	return env.Client.Patch(context.Background(), v, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// conditionLog records every status a watch of one VMI delivers: which hotplug conditions
// were ever True.
type conditionLog struct {
	mu   sync.Mutex
	seen map[string][]string // condition type → reasons it was True with
}

func watchConditions(t *testing.T, key client.ObjectKey) *conditionLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &vmletv1.VirtualMachineInstanceList{},
		client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	l := &conditionLog{seen: map[string][]string{}}
	go func() {
		for ev := range w.ResultChan() {
			v, ok := ev.Object.(*vmletv1.VirtualMachineInstance)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			l.mu.Lock()
			for _, c := range v.Status.Conditions {
				if (c.Type == vmletv1.VirtualMachineInstanceVCPUChange || c.Type == vmletv1.VirtualMachineInstanceMemoryChange) && c.Status == metav1.ConditionTrue {
					l.seen[c.Type] = append(l.seen[c.Type], c.Reason)
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *conditionLog) sawTrue(typ string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[typ])
}

// waitHotplugDone waits until the VMI's status says check and neither hotplug condition is set.
func waitHotplugDone(t *testing.T, key client.ObjectKey, what string, check func(v *vmletv1.VirtualMachineInstance) (bool, string)) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, 2*time.Minute, what, func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		ok, seen := check(v)
		for _, c := range []string{vmletv1.VirtualMachineInstanceVCPUChange, vmletv1.VirtualMachineInstanceMemoryChange} {
			if meta.FindStatusCondition(v.Status.Conditions, c) != nil {
				ok = false
			}
		}
		return ok, seen + "; " + summary(v)
	})
	return got
}

func guestMemTotalKiB(t *testing.T, out string) int64 {
	t.Helper()
	f := strings.Fields(out) // "MemTotal: 123456 kB"
	if len(f) < 2 {
		t.Fatalf("MemTotal line %q", out)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCPUAndMemoryHotplug creates the smallest VMI with maxSockets and maxGuest, patches
// spec.domain.cpu.sockets 1 → 3 → 2 and spec.domain.memory.guest 256Mi → 512Mi → 256Mi as
// `kubectl patch --type merge` would, and checks that the guest's nproc and MemTotal follow,
// that status.currentCPUTopology and status.memory follow, that the conditions clear, that the
// VM's CPU weight follows the vCPUs, and that the API refuses a change past a maximum and a
// change of a VMI created without one.
func TestCPUAndMemoryHotplug(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	a := startAgent(t, agentOptions{CPUWeights: true})
	defer a.stop(t)

	key := createManifest(t, "hotplug", hotplugManifest)
	// maxGuest 1 MiB over guest leaves no 2 MiB virtio-mem block: the API accepts a guest
	// change up to it, the agent refuses it with the reason.
	noBlock := createManifest(t, "hotplug-noblock", strings.Replace(hotplugManifest, "maxGuest: 768Mi", "maxGuest: 257Mi", 1))
	conds := watchConditions(t, key)
	v := waitPhase(t, key, vmletv1.Running, 3*time.Minute)
	waitSerial(t, consoleLog(v), testguest.MarkerReady)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
	c := launcherClient(t, a, v)
	memKiB := func() int64 { return guestMemTotalKiB(t, guestRun(t, c, "grep MemTotal /proc/meminfo")) }

	v = waitHotplugDone(t, key, "boot values in the status", func(v *vmletv1.VirtualMachineInstance) (bool, string) {
		m := v.Status.Memory
		return v.Status.CurrentCPUTopology != nil && m != nil && m.GuestAtBoot != nil && m.GuestCurrent != nil,
			fmt.Sprintf("cpu %+v memory %+v", v.Status.CurrentCPUTopology, m)
	})
	if got := v.Status.CurrentCPUTopology; got.Sockets != 1 || got.Cores != 1 || got.Threads != 1 {
		t.Fatalf("currentCPUTopology %+v at boot, want 1/1/1", got)
	}
	if got := v.Status.Memory.GuestAtBoot.Value(); got != 256<<20 {
		t.Fatalf("guestAtBoot %d, want 256Mi", got)
	}
	if n := guestRun(t, c, "nproc"); n != "1" {
		t.Fatalf("nproc %s at boot, want 1", n)
	}
	bootKiB := memKiB()
	weight := cpuWeightCheck(t, string(v.UID))
	weight(100)

	// Under TCG before QEMU 10 the launcher refuses vCPU unplug (QEMU crashes shortly after the
	// guest ejects a vCPU there), and under TCG a vCPU plugged after an unplug is refused (QEMU
	// could no longer migrate; qemu/tcg_vcpus.go): so after 3 → 2, plugging socket 3 again is
	// refused. A refused change says why; the guest keeps its vCPUs and the VMI runs on; the
	// spec going back to what runs clears the condition.
	l := v.Status.Launcher
	tcg := l.Accelerator == vmletv1.AcceleratorTCG
	unplugCrashes := qemu.TCGUnplugCrashes(string(l.Accelerator), l.QEMUVersion)
	type step struct {
		patch   string
		sockets uint32
		guestMi int64
		refused string // the agent reports HotVCPUChange False HotplugRefused, saying this
	}
	steps := []step{{`{"spec":{"domain":{"cpu":{"sockets":3}}}}`, 3, 256, ""}}
	switch {
	case unplugCrashes:
		steps = append(steps, step{`{"spec":{"domain":{"cpu":{"sockets":2}}}}`, 3, 256, "crashes qemu"})
	case tcg:
		steps = append(steps, step{`{"spec":{"domain":{"cpu":{"sockets":2}}}}`, 2, 256, ""},
			step{`{"spec":{"domain":{"cpu":{"sockets":3}}}}`, 2, 256, "plugged after a vcpu unplug"})
	default:
		steps = append(steps, step{`{"spec":{"domain":{"cpu":{"sockets":2}}}}`, 2, 256, ""})
	}
	last := steps[len(steps)-1].sockets
	steps = append(steps, step{`{"spec":{"domain":{"memory":{"guest":"512Mi"}}}}`, last, 512, ""},
		step{`{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}`, last, 256, ""})
	t.Logf("QEMU %s under %s: steps %v", l.QEMUVersion, l.Accelerator, steps)
	for _, s := range steps {
		t0 := time.Now()
		if err := mergePatch(key, s.patch); err != nil {
			t.Fatalf("patch %s: %v", s.patch, err)
		}
		if s.refused != "" {
			r := waitCondition(t, key, vmletv1.VirtualMachineInstanceVCPUChange, metav1.ConditionFalse, time.Minute)
			c := meta.FindStatusCondition(r.Status.Conditions, vmletv1.VirtualMachineInstanceVCPUChange)
			if c.Reason != "HotplugRefused" || !strings.Contains(c.Message, "tcg") || !strings.Contains(c.Message, s.refused) {
				t.Errorf("%s under TCG: HotVCPUChange %s %q, want HotplugRefused saying %q", s.patch, c.Reason, c.Message, s.refused)
			}
			waitEvent(t, r, "HotplugRefused")
			t.Logf("%s refused: %s", s.patch, c.Message)
			if err := mergePatch(key, fmt.Sprintf(`{"spec":{"domain":{"cpu":{"sockets":%d}}}}`, s.sockets)); err != nil {
				t.Fatal(err)
			}
		}
		v = waitHotplugDone(t, key, s.patch+" in the status", func(v *vmletv1.VirtualMachineInstance) (bool, string) {
			cpu, m := v.Status.CurrentCPUTopology, v.Status.Memory
			return cpu != nil && cpu.Sockets == s.sockets && m != nil && m.GuestCurrent.Value() == s.guestMi<<20 && m.GuestRequested.Value() == s.guestMi<<20,
				fmt.Sprintf("cpu %+v current %v requested %v", cpu, m.GuestCurrent, m.GuestRequested)
		})
		if v.Status.Phase != vmletv1.Running {
			t.Fatalf("after %s: %s", s.patch, summary(v))
		}
		// The guest onlines a plugged vCPU itself (its init, as udev would), a moment later.
		eventually(t, time.Minute, s.patch+" seen by the guest", func() (bool, string) {
			n, mem, err := guestCPUsAndMem(a, v)
			if err != nil {
				return false, err.Error()
			}
			return n == int(s.sockets) && abs(mem-bootKiB-(s.guestMi-256)<<10) < 1024, // within a few pages (as in TestMigrateAfterHotplug)
				fmt.Sprintf("nproc %d (want %d), MemTotal grew by %d KiB (want %d)", n, s.sockets, mem-bootKiB, (s.guestMi-256)<<10)
		})
		weight(100 * int64(s.sockets))
		t.Logf("%s: applied and seen by the guest in %s", s.patch, time.Since(t0).Round(time.Millisecond))
	}
	// The memory change waits on the guest's virtio-mem driver: the condition said so.
	if r := conds.sawTrue(vmletv1.VirtualMachineInstanceMemoryChange); len(r) == 0 {
		t.Errorf("HotMemoryChange was never True while the guest plugged memory")
	} else {
		t.Logf("HotMemoryChange True reasons seen: %v; HotVCPUChange: %v", slices.Compact(r), slices.Compact(conds.sawTrue(vmletv1.VirtualMachineInstanceVCPUChange)))
	}

	if err := mergePatch(noBlock, `{"spec":{"domain":{"memory":{"guest":"257Mi"}}}}`); err != nil {
		t.Fatal(err)
	}
	nb := waitCondition(t, noBlock, vmletv1.VirtualMachineInstanceMemoryChange, metav1.ConditionFalse, time.Minute)
	if c := meta.FindStatusCondition(nb.Status.Conditions, vmletv1.VirtualMachineInstanceMemoryChange); c.Reason != "HotplugUnsupported" || !strings.Contains(c.Message, "no virtio-mem device") {
		t.Errorf("HotMemoryChange of a VMI without a virtio-mem block: %s %q", c.Reason, c.Message)
	}
	if nb.Status.Phase != vmletv1.Running {
		t.Errorf("the refused change left the VMI %s", summary(nb))
	}
	waitEvent(t, nb, "HotplugUnsupported")

	// Past the maxima: refused by the API, naming the field.
	for patch, field := range map[string]string{
		`{"spec":{"domain":{"cpu":{"sockets":4}}}}`:         "spec.domain.cpu.sockets",
		`{"spec":{"domain":{"memory":{"guest":"1Gi"}}}}`:    "spec.domain.memory.guest",
		`{"spec":{"domain":{"memory":{"guest":"128Mi"}}}}`:  "spec.domain.memory.guest", // below the boot memory
		`{"spec":{"domain":{"cpu":{"maxSockets":8}}}}`:      "spec.domain",
		`{"spec":{"domain":{"memory":{"maxGuest":"2Gi"}}}}`: "spec.domain",
	} {
		wantInvalid(t, mergePatch(key, patch), field)
	}
	// A VMI created without maxima: its sockets and guest memory are fixed.
	fixed := createManifest(t, "hotplug-fixed", `
spec:
  domain:
    memory: {guest: 128Mi}
    devices: {}
  terminationGracePeriodSeconds: 0`)
	wantInvalid(t, mergePatch(fixed, `{"spec":{"domain":{"cpu":{"sockets":2}}}}`), "spec.domain")
	if err := mergePatch(fixed, `{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}`); !strings.Contains(fmt.Sprint(err), "maxGuest was set at creation") {
		t.Errorf("guest change of a VMI without maxGuest: %v, want the CEL message naming maxGuest", err)
	}
	for _, k := range []client.ObjectKey{key, fixed, noBlock} {
		o := &vmletv1.VirtualMachineInstance{}
		o.Namespace, o.Name = k.Namespace, k.Name
		if err := env.Client.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		waitDeleted(t, k)
	}
}

// wantInvalid asserts err is an Invalid API error with a cause on field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Errorf("want Invalid on %s, got %v", field, err)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		t.Errorf("no status details in %v", err)
		return
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == field {
			return
		}
	}
	t.Errorf("no cause on %s in %v", field, err)
}

// cpuWeightCheck returns a check that the VM's CPU group has the kubelet's shares for milli
// (waiting: the agent writes it around the plug).
func cpuWeightCheck(t *testing.T, uid string) func(milli int64) {
	vm := cpuGroups.VM("vmlet-" + uid)
	return func(milli int64) {
		t.Helper()
		shares := cpuweight.MilliCPUToShares(milli)
		f, want := "cpu.shares", strconv.FormatUint(shares, 10)
		if cpuGroups.Version == cpuweight.V2 {
			f, want = "cpu.weight", strconv.FormatUint(cpuweight.SharesToWeight(shares), 10)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("VM cpu weight for %dm", milli), func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(vm.Path, f))
			return err == nil && strings.TrimSpace(string(b)) == want, fmt.Sprintf("%s = %q (%v), want %s", f, b, err, want)
		})
	}
}

// TestMigrateAfterHotplug plugs a vCPU socket and 256Mi into a running VMI, migrates it to the
// other node and checks that the guest kept them (nproc, MemTotal), that the status still says
// so, and that the target goes on hotplugging (one more socket, the memory back down). The
// source unplugs no vCPU first: under TCG on QEMU 10 a migration started after one can stay in
// "setup" for good, and the launcher refuses it (TestCPUMemoryHotplug).
func TestMigrateAfterHotplug(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	n := startTwoNodes(t)
	defer n.stop(t)
	vmi := masqueradeVMI("mig-hotplug")
	vmi.Spec.Domain.CPU = &vmletv1.CPU{MaxSockets: 3}
	guest, maxGuest := resource.MustParse("256Mi"), resource.MustParse("768Mi")
	vmi.Spec.Domain.Memory = &vmletv1.Memory{Guest: &guest, MaxGuest: &maxGuest}
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(context.Background(), vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	on := n.on(vmi.Status.NodeName)
	memKiB := func(a *agent, v *vmletv1.VirtualMachineInstance) int64 {
		return guestMemTotalKiB(t, guestShell(t, a, v, "grep MemTotal /proc/meminfo"))
	}
	bootKiB := memKiB(on, vmi)
	sees := func(a *agent, what string, cpus int, grownKiB int64) {
		t.Helper()
		eventually(t, time.Minute, what, func() (bool, string) {
			v := mustGetVMI(t, vmi)
			// What the guest's console said last, should it not answer in time.
			console, _ := os.ReadFile(filepath.Join(a.runtime.Dir(string(v.UID)), "logs", "serial.log"))
			nproc, mem, err := guestCPUsAndMem(a, v)
			if err != nil {
				return false, err.Error() + "; console: " + tail(console)
			}
			// MemTotal moves by a few pages as the kernel frees or takes memory for itself
			// (seen: +36 KiB after a migration); a memory block is 128 MiB.
			return nproc == cpus && abs(mem-bootKiB-grownKiB) < 1024, fmt.Sprintf("nproc %d, MemTotal grown by %d KiB; console: %s", nproc, mem-bootKiB, tail(console))
		})
	}
	settled := func(what string, sockets uint32, guestMi int64) *vmletv1.VirtualMachineInstance {
		t.Helper()
		return waitHotplugDone(t, key, what, func(v *vmletv1.VirtualMachineInstance) (bool, string) {
			cpu, m := v.Status.CurrentCPUTopology, v.Status.Memory
			return cpu != nil && cpu.Sockets == sockets && m != nil && m.GuestCurrent != nil && m.GuestCurrent.Value() == guestMi<<20,
				fmt.Sprintf("cpu %+v memory %+v", cpu, m)
		})
	}
	// No vCPU unplug on the source: under TCG on QEMU 10 a migration started after one can stay
	// in "setup" for good (qemu/tcg_vcpus.go).
	if err := mergePatch(key, `{"spec":{"domain":{"cpu":{"sockets":2},"memory":{"guest":"512Mi"}}}}`); err != nil {
		t.Fatal(err)
	}
	settled("plugged before the migration", 2, 512)
	sees(on, "plugged before the migration", 2, 256<<10)

	from := vmi.Status.NodeName
	m := migrate(t, vmi, "mig-hotplug-there")
	if m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("phase %s, state %+v, conditions %+v", m.Status.Phase, m.Status.MigrationState, m.Status.Conditions)
	}
	if l := m.Status.MigrationState.SourceDomain; l == nil || l.PluggedSockets != 1 || l.MemoryRequestedMiB != 256 {
		t.Errorf("source layout %+v, want 1 plugged socket and 256 MiB requested", l)
	}
	vmi = settled("after the migration", 2, 512)
	if vmi.Status.NodeName == from {
		t.Fatalf("still on %s", from)
	}
	if l := vmi.Status.Launcher; l == nil || l.SocketsAtBoot != 1 || vmi.Status.Memory.GuestAtBoot.Value() != 256<<20 {
		t.Errorf("boot values after the migration: launcher %+v memory %+v", l, vmi.Status.Memory)
	}
	there, to := vmi.Status.NodeName, n.on(vmi.Status.NodeName)
	sees(to, "the guest kept its vCPUs and memory", 2, 256<<10)

	if err := mergePatch(key, `{"spec":{"domain":{"cpu":{"sockets":3},"memory":{"guest":"256Mi"}}}}`); err != nil {
		t.Fatal(err)
	}
	settled("hotplug on the target", 3, 256)
	sees(to, "hotplug on the target", 3, 0)

	// A vCPU unplug on the target: under TCG (QEMU 10) the VMI may not migrate any more, and
	// says so before anyone asks; a migration is refused at once with that reason.
	if err := mergePatch(key, `{"spec":{"domain":{"cpu":{"sockets":2}}}}`); err != nil {
		t.Fatal(err)
	}
	vmi = settled("unplugged on the target", 2, 256)
	sees(to, "unplugged on the target", 2, 0)
	if vmi.Status.Launcher.Accelerator != vmletv1.AcceleratorTCG {
		waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
		return
	}
	eventually(t, 30*time.Second, "LiveMigratable False after a TCG vCPU unplug", func() (bool, string) {
		c := meta.FindStatusCondition(mustGetVMI(t, vmi).Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == migration.ReasonHotplugNotMigratable &&
			strings.Contains(c.Message, "restart the VM"), fmt.Sprintf("%+v", c)
	})
	m = failureOf(t, startMigration(t, vmi, "mig-after-unplug"))
	if f := meta.FindStatusCondition(m.Status.Conditions, "Failed"); f == nil || f.Reason != migration.ReasonNotMigratable || !strings.Contains(f.Message, migration.ReasonHotplugNotMigratable) {
		t.Errorf("migration after a TCG unplug: condition %+v, want %s naming %s", f, migration.ReasonNotMigratable, migration.ReasonHotplugNotMigratable)
	}
	if v := mustGetVMI(t, vmi); v.Status.NodeName != there || v.Status.Phase != vmletv1.Running {
		t.Errorf("after the refused migration: %s", summary(v))
	}
}

// guestCPUsAndMem reads nproc and MemTotal (KiB) in the guest. Errors are returned, not
// fatal: while a Linux guest under TCG onlines a vCPU (stop_machine) its qemu-guest-agent
// may not answer in time and the launcher reports it not connected for a moment.
func guestCPUsAndMem(a *agent, v *vmletv1.VirtualMachineInstance) (int, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(string(v.UID)))
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", "nproc; grep MemTotal /proc/meminfo"}, nil, 20*time.Second)
	if err != nil {
		return 0, 0, err
	}
	var n int
	var kib int64
	if _, err := fmt.Sscanf(string(r.GetStdout()), "%d\nMemTotal: %d kB", &n, &kib); err != nil {
		return 0, 0, fmt.Errorf("guest output %q: %w", r.GetStdout(), err)
	}
	return n, kib, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
