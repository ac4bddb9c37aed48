package clustere2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
)

// TestClusterMigration: in cluster mode, a VirtualMachineInstanceMigration moves a running
// masquerade VMI to the other node and back again. Each time the controller makes a target
// launcher pod that the scheduler keeps off the source node, the target's agent prepares it
// and receives the guest (over TLS from the cluster's migration CA), takes the VMI over
// (status.nodeName, status.launcher.pod, an address from the new pod), and the source node is
// left clean (its pod, run and volume folders, pod cgroup and network namespace gone); the
// guest's memory survives (a process's counter keeps counting, same PID).
func TestClusterMigration(t *testing.T) {
	c := startClusterWith(t, clusterOptions{nodes: 2})
	ctx := context.Background()
	cl := c.env.Client
	second := c.others[0].name
	vmi := guestvmi.VMI("migrating", guestImage)
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
		Ports:                  []vmletv1.Port{{Name: "echo", Port: 8080, Protocol: vmletv1.ProtocolTCP}}}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), vmi) })
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready, migratable, with an address and its guest agent", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) && len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != "" &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
	})
	if ready.Status.NodeName != nodeName {
		t.Fatalf("vmi on %q, want %s (the scheduler's first node)", ready.Status.NodeName, nodeName)
	}
	pid := c.guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!")
	pid = strings.TrimSpace(pid)
	// A server in the guest on the declared port: reached at the launcher pod's address from
	// the node's pod network, before and after each migration (masquerade: the guest keeps its
	// own address, the new pod forwards the port).
	token := "vmlet-" + randomSuffix()
	c.guestShell(t, ready, "nc -ll -p 8080 -e echo "+token+" </dev/null >/dev/null 2>&1 &")
	c.waitServed(t, ready, token)

	from := ready
	sourcePod := c.launcherPod(t, string(vmi.UID))
	for i, to := range []string{second, nodeName} {
		before := c.guestCount(t, from)
		m := &vmletv1.VirtualMachineInstanceMigration{}
		m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, fmt.Sprintf("migrating-%d", i), vmi.Name
		if err := cl.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), m) }) // finished migrations are kept
		mk := client.ObjectKeyFromObject(m)
		poll.Until(t, 4*time.Minute, m.Name+" Succeeded", func() (bool, string) {
			if err := cl.Get(ctx, mk, m); err != nil {
				return false, err.Error()
			}
			if m.Status.Phase == vmletv1.MigrationFailed {
				t.Fatalf("%s failed: %+v", m.Name, m.Status.MigrationState)
			}
			return m.Status.Phase == vmletv1.MigrationSucceeded, fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
		})
		v := c.waitVMI(t, key, time.Minute, "on "+to+" with its new pod and address", func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.NodeName == to && v.Status.Launcher != nil && v.Status.Launcher.Pod != sourcePod.Name &&
				len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != from.Status.Interfaces[0].IP &&
				meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
		})
		ms := v.Status.MigrationState
		if ms == nil || !ms.Completed || ms.Failed || ms.SourceNode != from.Status.NodeName || ms.TargetNode != to ||
			ms.SourcePod != sourcePod.Name || ms.TargetPod != v.Status.Launcher.Pod || ms.TargetNodeAddress == "" {
			t.Errorf("migrationState after %s: %+v", m.Name, ms)
		}
		if v.Status.Phase != vmletv1.Running {
			t.Errorf("vmi phase %s after %s", v.Status.Phase, m.Name)
		}
		pod := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: v.Status.Launcher.Pod}, pod); err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != to || pod.Status.Phase != corev1.PodRunning {
			t.Errorf("launcher pod %s on %s, %s; want Running on %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase, to)
		}
		launcherRoot, _, _, _ := c.roots(to)
		subnet := netip.MustParsePrefix(pod.Status.PodIP + "/24")
		if a, err := netip.ParseAddr(v.Status.Interfaces[0].IP); err != nil || !subnet.Contains(a) {
			t.Errorf("interface address %s, want one of the new pod's network %s", v.Status.Interfaces[0].IP, subnet)
		}
		if _, err := os.Stat(launcherpod.HostSocket(launcherRoot, vmi.UID)); err != nil {
			t.Errorf("no launcher socket on %s: %v", to, err)
		}
		// The guest's memory came along: the same counter process, still counting.
		if got := strings.TrimSpace(c.guestShell(t, v, "cat /proc/"+pid+"/cmdline >/dev/null && echo ok")); got != "ok" {
			t.Fatalf("counter process %s gone after %s", pid, m.Name)
		}
		poll.Until(t, 30*time.Second, "the counter counting on "+to, func() (bool, string) {
			n := c.guestCount(t, v)
			return n > before, fmt.Sprintf("count %d, was %d before the migration", n, before)
		})
		c.waitServed(t, v, token)
		c.waitNodeClean(t, from.Status.NodeName, vmi, sourcePod)
		from, sourcePod = v, pod
	}

	if err := cl.Delete(ctx, from); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "VMI and its pods gone", func() (bool, string) {
		err := cl.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		var l corev1.PodList
		lerr := cl.List(ctx, &l, client.MatchingLabels{launcherpod.LabelVMIUID: string(vmi.UID)})
		return apierrors.IsNotFound(err) && lerr == nil && len(l.Items) == 0, fmt.Sprintf("vmi: %v, %d pods %v", err, len(l.Items), lerr)
	})
	c.waitNodeClean(t, nodeName, vmi, nil)
	c.waitNodeClean(t, second, vmi, nil)
}

// waitNodeClean waits until node keeps nothing of vmi: its launcher pod (when given) is gone
// with its cgroup and network namespace, and the vmi's run and volume folders are removed.
func (c *cluster) waitNodeClean(t *testing.T, node string, vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) {
	t.Helper()
	launcherRoot, volumeRoot, cgroups, netns := c.roots(node)
	paths := []string{launcherpod.HostRunDir(launcherRoot, vmi.UID), launcherpod.HostVolumeDir(volumeRoot, vmi.UID)}
	if pod != nil {
		paths = append(paths, filepath.Join(cgroups, "pod-"+string(pod.UID)), filepath.Join(netns, "vmlet-"+string(pod.UID)))
	}
	poll.Until(t, time.Minute, node+" clean of "+vmi.Name, func() (bool, string) {
		if pod != nil {
			if err := c.env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("pod %s: %v", pod.Name, err)
			}
		}
		for _, p := range paths {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				return false, fmt.Sprintf("%s left: %v", p, err)
			}
		}
		return true, ""
	})
}

// waitServed waits until port 8080 of v's launcher pod answers token from its node's pod
// network (socat in the namespace of the node's pod bridge).
func (c *cluster) waitServed(t *testing.T, v *vmletv1.VirtualMachineInstance, token string) {
	t.Helper()
	ip := v.Status.Interfaces[0].IP
	ns := c.cniNetnsOf(v.Status.NodeName)
	poll.Until(t, time.Minute, fmt.Sprintf("%s:8080 answering from %s", ip, ns), func() (bool, string) {
		out, err := exec.Command("ip", "netns", "exec", ns, "socat", "-T", "5", "-", "TCP:"+net.JoinHostPort(ip, "8080")+",connect-timeout=3").CombinedOutput()
		return strings.TrimSpace(string(out)) == token, fmt.Sprintf("%q %v", out, err)
	})
}

// guestShell runs cmd in v's guest through its launcher's guest agent, on v's node; it waits
// (30 s) for the agent to connect (after a migration the target's reconnects).
func (c *cluster) guestShell(t *testing.T, v *vmletv1.VirtualMachineInstance, cmd string) string {
	t.Helper()
	launcherRoot, _, _, _ := c.roots(v.Status.NodeName)
	var out string
	poll.Until(t, 30*time.Second, "guest exec "+cmd+" on "+v.Status.NodeName, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lc, err := launcher.Dial(ctx, launcherpod.HostSocket(launcherRoot, v.UID))
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		r, err := lc.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 20*time.Second)
		if errors.Is(err, launcher.ErrAgentNotConnected) {
			return false, err.Error() // the guest agent is not connected (yet)
		}
		if err != nil {
			t.Fatalf("guest exec %q on %s: %v", cmd, v.Status.NodeName, err)
		}
		if r.GetExitCode() != 0 {
			t.Fatalf("guest exec %q: exit %d: %s", cmd, r.GetExitCode(), r.GetStderr())
		}
		out = string(r.GetStdout())
		return true, ""
	})
	return out
}

func (c *cluster) guestCount(t *testing.T, v *vmletv1.VirtualMachineInstance) int {
	t.Helper()
	var n int
	poll.Until(t, 30*time.Second, "the guest's counter file", func() (bool, string) {
		out := strings.TrimSpace(c.guestShell(t, v, "cat /tmp/count 2>/dev/null || true"))
		var err error
		n, err = strconv.Atoi(out)
		return err == nil, out
	})
	return n
}

// TestClusterDrain: the drain taint (vmlet.dev/drain:NoSchedule, what `vmctl drain` puts on a
// node) moves a LiveMigrate VMI to the other node by a migration the evacuation controller
// creates, with a target launcher pod there; the drained node is left clean and the guest's
// process keeps counting.
func TestClusterDrain(t *testing.T) {
	c := startClusterWith(t, clusterOptions{nodes: 2})
	ctx := context.Background()
	cl := c.env.Client
	second := c.others[0].name
	vmi := guestvmi.VMI("drained", guestImage)
	live := vmletv1.EvictionStrategyLiveMigrate
	vmi.Spec.EvictionStrategy = &live
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), vmi) })
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready with its guest agent", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	if ready.Status.NodeName != nodeName {
		t.Fatalf("vmi on %q, want %s", ready.Status.NodeName, nodeName)
	}
	pid := strings.TrimSpace(c.guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!"))
	sourcePod := c.launcherPod(t, string(vmi.UID))

	node := &corev1.Node{}
	if err := cl.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: evacuation.TaintKey, Effect: corev1.TaintEffectNoSchedule})
	if err := cl.Patch(ctx, node, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // untaint: the node is the package's
		n := &corev1.Node{}
		if err := cl.Get(context.Background(), client.ObjectKey{Name: nodeName}, n); err == nil {
			p := client.MergeFrom(n.DeepCopy())
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == evacuation.TaintKey })
			_ = cl.Patch(context.Background(), n, p)
		}
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := cl.List(context.Background(), &l, client.InNamespace(vmi.Namespace)); err == nil {
			for i := range l.Items {
				_ = cl.Delete(context.Background(), &l.Items[i])
			}
		}
	})
	v := c.waitVMI(t, key, 4*time.Minute, "moved to "+second, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName == second && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			v.Status.MigrationState != nil && v.Status.MigrationState.Completed
	})
	if got := strings.TrimSpace(c.guestShell(t, v, "kill -0 "+pid+" && echo ok")); got != "ok" {
		t.Fatalf("counter process %s gone after the drain", pid)
	}
	c.waitNodeClean(t, nodeName, vmi, sourcePod)
}
