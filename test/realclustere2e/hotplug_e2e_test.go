package realclustere2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/poll"
)

// hotplugSpec boots the test guest by kernelBoot with room for vCPUs and memory: maxSockets
// past what this 2-core node can give (a resize there is one the kubelet finds infeasible).
const hotplugSpec = `spec:
  domain:
    cpu: {maxSockets: 24}
    memory: {guest: 256Mi, maxGuest: 768Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet panic=-1
        container: {image: ` + kernelImage + `, kernelPath: /vmlinuz, initrdPath: /initramfs.gz}
    devices: {}
`

// containerCgroup is the v1 cgroup folder of QEMU's container for controller (e.g. "memory",
// "cpu"), as /proc/PID/cgroup names it.
func containerCgroup(t testing.TB, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == controller {
				return filepath.Join("/sys/fs/cgroup", f[1], f[2])
			}
		}
	}
	t.Fatalf("no %s cgroup for %d in %s", controller, pid, b)
	return ""
}

func readInt(t testing.TB, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// launcherResources is the launcher container's resources in the pod's spec and as the
// kubelet reports them in its status (nil when it reports none).
func launcherResources(t testing.TB, vmi *vmletv1.VirtualMachineInstance) (spec corev1.ResourceRequirements, status *corev1.ResourceRequirements) {
	t.Helper()
	p := launcherPod(t, vmi)
	if p == nil {
		t.Fatalf("no launcher pod: %s", summary(vmi))
	}
	for _, c := range p.Spec.Containers {
		if c.Name == launcherpod.ContainerName {
			spec = c.Resources
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == launcherpod.ContainerName {
			status = cs.Resources
		}
	}
	return spec, status
}

// TestHotplugResizesLauncherPod: CPU and memory hotplug on the real kubelet. The VMI's sockets
// and memory.guest are patched with kubectl; before plugging more, the agent resizes the
// launcher pod in place (pods/resize) and plugs only once the kubelet applied it: the pod's
// spec and status, the container's real cgroup (cpu.shares, memory.limit_in_bytes) and the
// guest (nproc, MemTotal) all follow. A vCPU count whose CPU request the node cannot give is
// refused by the kubelet (Infeasible): the VMI says ResizeRefused, nothing is plugged, the
// guest runs on, and going back clears it.
func TestHotplugResizesLauncherPod(t *testing.T) {
	need(t)
	name := "hotplug-" + suffix()
	createVMI(t, name, hotplugSpec)
	vmi := waitBooted(t, name)
	qemu := int(vmi.Status.Launcher.PID)
	cpuCg, memCg := containerCgroup(t, qemu, "cpu"), containerCgroup(t, qemu, "memory")
	spec0, _ := launcherResources(t, vmi)
	mem0 := spec0.Limits[corev1.ResourceMemory]
	t.Logf("booted: launcher requests %v limits %v; cpu.shares %d, memory limit %d", spec0.Requests, spec0.Limits,
		readInt(t, filepath.Join(cpuCg, "cpu.shares")), readInt(t, filepath.Join(memCg, "memory.limit_in_bytes")))
	nproc := func() string { return guestShell(t, vmi, "nproc") }
	memKiB := func() int64 {
		f := strings.Fields(guestShell(t, vmi, "grep MemTotal /proc/meminfo"))
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := nproc(); n != "1" {
		t.Fatalf("nproc %s at boot, want 1", n)
	}
	bootKiB := memKiB()

	// Applied: pod spec, the kubelet's status, the cgroup and the guest. It returns the pod's
	// memory limit (the guest's memory plus an overhead that grows with the vCPUs).
	applied := func(what string, sockets uint32, guestMi int64) int64 {
		t.Helper()
		cpuMilli := int64(sockets) * launcherpod.CPUPerVCPU.MilliValue()
		t0 := time.Now()
		v := waitVMI(t, name, 3*time.Minute, what+" in the status", func(v *vmletv1.VirtualMachineInstance) bool {
			c, m := v.Status.CurrentCPUTopology, v.Status.Memory
			return c != nil && c.Sockets == sockets && m != nil && m.GuestCurrent != nil && m.GuestCurrent.Value() == guestMi<<20 &&
				meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceVCPUChange) == nil &&
				meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceMemoryChange) == nil
		})
		spec, status := launcherResources(t, v)
		if got := spec.Requests[corev1.ResourceCPU]; got.MilliValue() != cpuMilli {
			t.Errorf("%s: pod CPU request %s, want %dm", what, got.String(), cpuMilli)
		}
		lim := spec.Limits[corev1.ResourceMemory]
		memBytes := lim.Value()
		if status == nil {
			t.Errorf("%s: the kubelet reports no container resources", what)
		} else if c, m := status.Requests[corev1.ResourceCPU], status.Limits[corev1.ResourceMemory]; c.MilliValue() != cpuMilli || m.Value() != memBytes {
			t.Errorf("%s: the kubelet reports requests %v limits %v", what, status.Requests, status.Limits)
		}
		if got, want := readInt(t, filepath.Join(cpuCg, "cpu.shares")), cpuMilli*1024/1000; got != want {
			t.Errorf("%s: cpu.shares %d, want %d", what, got, want)
		}
		if got := readInt(t, filepath.Join(memCg, "memory.limit_in_bytes")); got != memBytes {
			t.Errorf("%s: memory.limit_in_bytes %d, want %d", what, got, memBytes)
		}
		poll.Until(t, time.Minute, what+" seen by the guest", func() (bool, string) {
			n, kib := nproc(), memKiB()
			return n == strconv.Itoa(int(sockets)) && kib-bootKiB == (guestMi-256)<<10,
				fmt.Sprintf("nproc %s, MemTotal grew by %d KiB", n, kib-bootKiB)
		})
		t.Logf("%s: pod resized by the kubelet (requests %v, limits %v), then plugged, in %s", what, spec.Requests, spec.Limits,
			time.Since(t0).Round(time.Millisecond))
		return memBytes
	}
	patch := func(p string) { kubectl(t, "", "patch", "vmi", name, "--type", "merge", "-p", p) }
	patch(`{"spec":{"domain":{"cpu":{"sockets":3}}}}`)
	mem3 := applied("sockets 3", 3, 256)
	if mem3 <= mem0.Value() {
		t.Errorf("memory limit %d with 3 vCPUs, %d with 1: want the vCPUs' overhead added", mem3, mem0.Value())
	}

	// 24 vCPUs ask more CPU than the node has: the kubelet refuses the resize.
	patch(`{"spec":{"domain":{"cpu":{"sockets":24}}}}`)
	r := waitVMI(t, name, 2*time.Minute, "HotVCPUChange False ResizeRefused", func(v *vmletv1.VirtualMachineInstance) bool {
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceVCPUChange)
		return c != nil && c.Status == "False" && c.Reason == "ResizeRefused"
	})
	t.Logf("infeasible: %s", meta.FindStatusCondition(r.Status.Conditions, vmletv1.VirtualMachineInstanceVCPUChange).Message)
	if r.Status.Phase != vmletv1.Running || r.Status.CurrentCPUTopology == nil || r.Status.CurrentCPUTopology.Sockets != 3 || nproc() != "3" {
		t.Errorf("after a refused resize: %s, topology %+v, nproc %s", summary(r), r.Status.CurrentCPUTopology, nproc())
	}
	patch(`{"spec":{"domain":{"cpu":{"sockets":3}}}}`)
	if got := applied("back to sockets 3", 3, 256); got != mem3 {
		t.Errorf("memory limit %d back at 3 vCPUs, was %d", got, mem3)
	}

	patch(`{"spec":{"domain":{"memory":{"guest":"512Mi"}}}}`)
	if got := applied("guest 512Mi", 3, 512); got < mem3+256<<20 {
		t.Errorf("memory limit %d with 256Mi more guest memory, was %d", got, mem3)
	}
	patch(`{"spec":{"domain":{"memory":{"guest":"256Mi"}}}}`)
	if got := applied("guest 256Mi again", 3, 256); got != mem3 {
		t.Errorf("memory limit %d after the memory went back, want %d", got, mem3)
	}

	deleteVMI(t, name)
}
