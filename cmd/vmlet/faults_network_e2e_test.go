package main_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/poll"
)

// Rows of TestFaultMatrix on the node network: the node bridge deleted under a running VM, and
// the agent restarted with another pod subnet while it runs.

// servingVMI gives the row's VMI a masquerade interface with port 80 declared.
func servingVMI(_ *testing.T, _ *faultVM, vmi *vmletv1.VirtualMachineInstance) {
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
		Ports:                  []vmletv1.Port{{Name: "http", Port: 80, Protocol: vmletv1.ProtocolTCP}}}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
}

// serve starts a one-line TCP service on port 80 in the guest and returns the pod address and
// the line the service answers.
func (f *faultVM) serve(t *testing.T) (netip.Addr, string) {
	t.Helper()
	v := waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "guest agent connected, pod address", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected) &&
			len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != ""
	})
	addr, err := netip.ParseAddr(v.Status.Interfaces[0].IP)
	if err != nil {
		t.Fatal(err)
	}
	reply := "hello-" + f.uid[:8]
	guestSh(t, filepath.Join(f.runDir, process.ReadySocket), "ip link set lo up; nc -ll -p 80 -e echo "+reply+" </dev/null >/dev/null 2>&1 &")
	return addr, reply
}

// waitServed waits until a connection from the node's network namespace to the guest's port 80
// (through the pod address) reads want.
func (f *faultVM) waitServed(t *testing.T, addr netip.Addr, want string, d time.Duration) {
	t.Helper()
	ap := netip.AddrPortFrom(addr, 80).String()
	poll.Until(t, d, "the guest's service at "+ap+" from the node", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := network.DialTCP(ctx, f.s.nodeNetns, ap)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		got, err := io.ReadAll(conn)
		return strings.TrimSpace(string(got)) == want, fmt.Sprintf("%q, %v", got, err)
	})
}

// bridgeDeletedRow: the node bridge (vmlet0) deleted under a running VM with a declared port.
// The agent makes it again with the VM's veth as a port: the guest's service answers at the
// pod address again, the same QEMU runs.
func bridgeDeletedRow() faultRow {
	return faultRow{
		name:        "node-bridge-deleted",
		waitRunning: true,
		setup:       servingVMI,
		inject: func(t *testing.T, f *faultVM) {
			addr, reply := f.serve(t)
			f.waitServed(t, addr, reply, time.Minute)
			if out, err := exec.Command("ip", "-n", filepath.Base(f.s.nodeNetns), "link", "del", network.DefaultBridge).CombinedOutput(); err != nil {
				t.Fatalf("delete the node bridge: %v: %s", err, out)
			}
			f.inject()
			f.waitServed(t, addr, reply, 2*time.Minute)
			f.keptVM(t, f.ready(t, time.Minute, "Ready after the bridge came back"))
		},
	}
}

// otherSubnetRow: the agent SIGKILLed while a VM runs and started with another --node-subnet:
// it refuses to start, naming the VM's pod (its VMI's UID), and leaves the VM as it was (the bridge's gateway and
// NAT are not replaced under it); started with the subnet the VM was made with, it adopts the VM.
func otherSubnetRow() faultRow {
	return faultRow{
		name:        "agent-restart/other-node-subnet",
		waitRunning: true,
		setup:       servingVMI,
		inject: func(t *testing.T, f *faultVM) {
			addr, reply := f.serve(t)
			f.waitServed(t, addr, reply, time.Minute)
			f.killAgent(t)
			base := f.s.extraArgs
			f.s.extraArgs = append(append([]string(nil), base...), "--node-subnet", "198.19.200.0/24")
			bad := f.s.start(t)
			f.s.extraArgs = base
			select {
			case err := <-bad.done:
				out := bad.out.String()
				if err == nil || !strings.Contains(out, f.uid) || !strings.Contains(out, "--node-subnet") {
					t.Errorf("agent with another subnet: exit %v, output:\n%s\nwant a refusal naming the VM's pod (%s) and the flag", err, tailOf(out), f.uid)
				}
			case <-time.After(time.Minute):
				bad.stop(t)
				t.Fatal("the agent started with another --node-subnet while a VM of the old one runs")
			}
			f.waitServed(t, addr, reply, 10*time.Second) // untouched while no agent runs
			f.a = f.s.start(t)
			f.keptVM(t, f.ready(t, 2*time.Minute, "Ready after the restart with the right subnet"))
			f.waitServed(t, addr, reply, time.Minute)
		},
	}
}
