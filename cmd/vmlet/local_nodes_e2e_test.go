package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
)

// TestLocalNodes: `vmlet local --nodes 2` registers two Nodes, each with its own namespace on
// the node fabric; two VMIs are placed on different nodes and run; the pod netns of the first
// reaches the second's pod address over TCP across the fabric without NAT, and the second's
// guest behind it (its forwarded port answers with the guest kernel's reset). Ctrl-C with
// --keep-vms leaves the VMs and the fabric, and the next start adopts them (same launcher and
// QEMU, still reachable across the fabric); its Ctrl-C leaves no VM, namespace, fabric link,
// nft table, cgroup or run folder.
func TestLocalNodes(t *testing.T) {
	s := newLocalSetup(t)
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	fabric := network.FabricConfig{Name: "e2e" + hex.EncodeToString(b), UplinkNetns: s.nodeNetns}
	nodes := []string{localNode + "-1", localNode + "-2"}
	t.Cleanup(func() { cleanupNodes(t, s, fabric, nodes) })
	uplinkBefore := uplinkState(t, s.nodeNetns)

	p := s.run(t, append(s.commonArgs(), "--demo", "", "--nodes", "2", "--fabric-name", fabric.Name, "--keep-vms")...)
	p.waitOutput(t, "nodes "+strings.Join(nodes, ", ")+" registered", 3*time.Minute)
	c := s.client(t)
	ctx := context.Background()
	for _, n := range nodes {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: n}, node); err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
	}
	plan, err := network.PlanFabric(fabric, nodes)
	if err != nil {
		t.Fatal(err)
	}
	vmis := []*vmletv1.VirtualMachineInstance{masqueradeVMI("node-a"), masqueradeVMI("node-b")}
	for _, v := range vmis {
		if err := c.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	var vms []nodeVM
	for _, v := range vmis {
		vms = append(vms, s.runningOn(t, c, v.Name))
	}
	if vms[0].node == vms[1].node {
		t.Fatalf("both VMIs on node %s, want one per node", vms[0].node)
	}
	for _, vm := range vms {
		fn := plan[slices.Index(nodes, vm.node)]
		if !fn.PodSubnet.Contains(vm.podAddr) {
			t.Errorf("%s on %s: pod address %s outside the node's pod subnet %s", vm.key.Name, vm.node, vm.podAddr, fn.PodSubnet)
		}
	}
	a, bv := vms[0], vms[1]
	t.Logf("%s on %s (pod %s), %s on %s (pod %s)", a.key.Name, a.node, a.podAddr, bv.key.Name, bv.node, bv.podAddr)

	ln, err := network.ListenTCP(bv.podNetns, ":7300")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(conn, "hello %s\n", conn.RemoteAddr())
			conn.Close()
		}
	}()
	assertCrossNode(t, a, bv)

	// --keep-vms leaves the VMs and the fabric; the next start adopts both.
	p.interrupt(t)
	for _, vm := range vms {
		if !poll.Alive(vm.launcherPid) || !poll.Alive(vm.qemuPid) {
			t.Fatalf("--keep-vms: %s: launcher alive %v, QEMU alive %v", vm.key.Name, poll.Alive(vm.launcherPid), poll.Alive(vm.qemuPid))
		}
	}
	for _, fn := range plan {
		if _, err := os.Stat(fn.NetnsPath); err != nil {
			t.Fatalf("--keep-vms: node netns %s: %v", fn.NetnsPath, err)
		}
	}
	s.assertControlPlaneGone(t, 10*time.Second)
	p = s.run(t, append(s.commonArgs(), "--demo", "", "--nodes", "2", "--fabric-name", fabric.Name)...)
	p.waitOutput(t, "nodes "+strings.Join(nodes, ", ")+" registered", 3*time.Minute)
	c = s.client(t)
	for _, vm := range vms {
		again := s.runningOn(t, c, vm.key.Name)
		if again.uid != vm.uid || again.node != vm.node || again.qemuPid != vm.qemuPid || again.launcherPid != vm.launcherPid {
			t.Errorf("%s after the restart: %+v, want the same VM adopted: %+v", vm.key.Name, again, vm)
		}
	}
	assertCrossNode(t, a, bv)
	ln.Close() // its socket would keep b's pod netns alive

	p.interrupt(t)
	s.assertControlPlaneGone(t, 10*time.Second)
	for _, vm := range vms {
		s.assertNodeVMGone(t, vm)
	}
	s.assertNodeDirsGone(t, nodes...)
	s.assertFabricGone(t, fabric, plan, uplinkBefore)
}

// nodeVM is a running VMI of a multi-node stack and where it runs.
type nodeVM struct {
	key                  client.ObjectKey
	uid, node            string
	podNetns             string
	podAddr              netip.Addr
	launcherPid, qemuPid int
}

// runningOn waits for VMI name to run with its pod address in status, on either node.
func (s *localSetup) runningOn(t *testing.T, c client.Client, name string) nodeVM {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	v := waitFor(t, c, key, 4*time.Minute, "Running with a QEMU pid and a pod address", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Running && v.Status.Launcher != nil && v.Status.Launcher.PID > 0 &&
			len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != ""
	})
	addr, err := netip.ParseAddr(v.Status.Interfaces[0].IP)
	if err != nil {
		t.Fatal(err)
	}
	uid, node := string(v.UID), v.Status.NodeName
	return nodeVM{key: key, uid: uid, node: node, podAddr: addr,
		podNetns:    filepath.Join(s.podNetns, node, "vmlet-"+uid),
		launcherPid: readPid(t, filepath.Join(s.runRoot, node, uid, "launcher.pid")), qemuPid: int(v.Status.Launcher.PID)}
}

// assertNodeVMGone checks that nothing of the VM is left on its node: processes, run folder,
// volumes, pod netns, launcher cgroup, CPU group.
func (s *localSetup) assertNodeVMGone(t *testing.T, vm nodeVM) {
	t.Helper()
	for _, p := range []int{vm.launcherPid, vm.qemuPid} {
		if poll.Alive(p) {
			t.Errorf("%s: process %d left", vm.key.Name, p)
		}
	}
	paths := []string{filepath.Join(s.runRoot, vm.node, vm.uid), filepath.Join(s.stateDir, "nodes", vm.node, "volumes", vm.uid),
		vm.podNetns, filepath.Join(s.cgroupMount, s.cg, vm.node, "vmlet-"+vm.uid)}
	if h, err := cpuweight.Find(filepath.Join(s.cg, vm.node)); err == nil {
		paths = append(paths, h.VM("vmlet-"+vm.uid).Path)
	}
	for _, path := range paths {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s left: %v", vm.key.Name, path, err)
		}
	}
}

func masqueradeVMI(name string) *vmletv1.VirtualMachineInstance {
	vmi := guestvmi.VMI(name, demoImage)
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{
		Name:                   "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
		Ports:                  []vmletv1.Port{{Name: "ssh", Port: 22, Protocol: vmletv1.ProtocolTCP}},
	}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	return vmi
}

// uplinkState lists the links and nft tables of the fabric's uplink netns.
func uplinkState(t *testing.T, path string) []string {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		out = append(out, "link "+l.Attrs().Name)
	}
	nc, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := nc.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		out = append(out, "table "+tb.Name)
	}
	slices.Sort(out)
	return out
}

// cleanupNodes removes what a failed multi-node test left: vmlet (first), the nodes' launchers,
// pod namespaces, CPU groups and cgroup folders, and the fabric. The nodes' launchers go before
// s.cleanup, which takes the nodes' run folders beneath the run root for launcher folders and
// would remove them with the launchers' pid files, leaving the launchers running.
func cleanupNodes(t *testing.T, s *localSetup, fabric network.FabricConfig, nodes []string) {
	defer s.cleanup(t)
	for _, p := range s.procs {
		if !p.gone {
			_ = p.cmd.Process.Kill()
			p.err = <-p.done
			p.gone = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range nodes {
		var cpu *cpuweight.Hierarchy
		if h, err := cpuweight.Find(filepath.Join(s.cg, n)); err == nil {
			cpu = h
		}
		rt := &process.Runtime{RunRoot: filepath.Join(s.runRoot, n), CgroupParent: filepath.Join(s.cgroupMount, s.cg, n), CPU: cpu}
		ids, _ := rt.List()
		for _, id := range ids {
			if err := rt.Remove(ctx, id); err != nil {
				t.Logf("remove leftover launcher %s: %v", id, err)
			}
		}
		mounts, _ := filepath.Glob(filepath.Join(s.podNetns, n, "vmlet-*"))
		for _, m := range mounts {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
			_ = os.Remove(m)
		}
		_ = os.Remove(filepath.Join(s.podNetns, n))
		if cpu != nil {
			_ = cpu.Teardown()
		}
		_ = os.Remove(filepath.Join(s.cgroupMount, s.cg, n))
	}
	if err := network.RemoveFabric(fabric); err != nil {
		t.Errorf("remove fabric: %v", err)
	}
}

// assertCrossNode: a's pod netns reaches b's pod address on a port b does not forward to its
// guest (7300, where the test listens in b's pod netns), seen from a's pod address (routed, no
// NAT), and b's forwarded port 22, DNATed to b's guest, whose kernel resets (no sshd): the
// guest is reachable across the fabric.
func assertCrossNode(t *testing.T, a, b nodeVM) {
	t.Helper()
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := network.DialTCP(dctx, a.podNetns, netip.AddrPortFrom(b.podAddr, 7300).String())
	if err != nil {
		t.Fatalf("pod %s (node %s) -> pod %s (node %s): %v", a.key.Name, a.node, b.key.Name, b.node, err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	conn.Close()
	if want := "hello " + a.podAddr.String() + ":"; err != nil || !strings.HasPrefix(string(got), want) {
		t.Errorf("pod a -> pod b: %q, %v; want %s… (no NAT between nodes)", got, err, want)
	}
	t.Logf("pod a -> pod b: %q", got)
	// a's pod netns -> b's forwarded port 22: DNATed to b's guest, whose kernel resets (no
	// sshd): the guest is reachable across the fabric.
	poll.Until(t, 2*time.Minute, "b's guest answers its forwarded port 22", func() (bool, string) {
		dctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := network.DialTCP(dctx, a.podNetns, netip.AddrPortFrom(b.podAddr, 22).String())
		if err == nil {
			conn.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED), fmt.Sprint(err)
	})
}

// assertFabricGone checks, after a full shutdown, that the fabric's nodes left no node netns or
// pod netns folder, the fabric netns is gone, and the uplink's links and tables are as before.
func (s *localSetup) assertFabricGone(t *testing.T, fabric network.FabricConfig, plan []network.FabricNode, uplinkBefore []string) {
	t.Helper()
	for _, fn := range plan {
		if _, err := os.Stat(fn.NetnsPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node netns %s left: %v", fn.NetnsPath, err)
		}
		if _, err := os.Stat(filepath.Join(s.podNetns, fn.Name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod netns folder of %s left: %v", fn.Name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(network.DefaultNetnsDir, fabric.Name+"-fabric")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fabric netns left: %v", err)
	}
	if after := uplinkState(t, s.nodeNetns); !slices.Equal(after, uplinkBefore) {
		t.Errorf("uplink netns links and tables after shutdown %v, want %v", after, uplinkBefore)
	}
}
