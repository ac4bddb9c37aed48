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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/cpuweight"
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
	conds := watchConditions(t, key)
	v := waitPhase(t, key, vmletv1.Running, 3*time.Minute)
	waitSerial(t, consoleLog(v), testguest.MarkerReady)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
	c := launcherClient(t, a, v)
	nproc := func() string { return guestRun(t, c, "nproc") }
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
	if n := nproc(); n != "1" {
		t.Fatalf("nproc %s at boot, want 1", n)
	}
	bootKiB := memKiB()
	weight := cpuWeightCheck(t, string(v.UID))
	weight(100)

	steps := []struct {
		patch   string
		sockets uint32
		guestMi int64
	}{
		{`{"spec":{"domain":{"cpu":{"sockets":3}}}}`, 3, 256},
		{`{"spec":{"domain":{"cpu":{"sockets":2}}}}`, 2, 256},
		{`{"spec":{"domain":{"memory":{"guest":"512Mi"}}}}`, 2, 512},
		{`{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}`, 2, 256},
	}
	for _, s := range steps {
		t0 := time.Now()
		if err := mergePatch(key, s.patch); err != nil {
			t.Fatalf("patch %s: %v", s.patch, err)
		}
		v = waitHotplugDone(t, key, s.patch+" in the status", func(v *vmletv1.VirtualMachineInstance) (bool, string) {
			cpu, m := v.Status.CurrentCPUTopology, v.Status.Memory
			return cpu != nil && cpu.Sockets == s.sockets && m != nil && m.GuestCurrent.Value() == s.guestMi<<20 && m.GuestRequested.Value() == s.guestMi<<20,
				fmt.Sprintf("cpu %+v current %v requested %v", cpu, m.GuestCurrent, m.GuestRequested)
		})
		// The guest onlines a plugged vCPU itself (its init, as udev would), a moment later.
		eventually(t, time.Minute, s.patch+" seen by the guest", func() (bool, string) {
			n, grown := nproc(), memKiB()-bootKiB
			return n == strconv.Itoa(int(s.sockets)) && grown == (s.guestMi-256)<<10,
				fmt.Sprintf("nproc %s (want %d), MemTotal grew by %d KiB (want %d)", n, s.sockets, grown, (s.guestMi-256)<<10)
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
	for _, k := range []client.ObjectKey{key, fixed} {
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
