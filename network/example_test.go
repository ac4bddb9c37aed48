package network_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
)

// The life of one VM's network in local mode (root needed; compiled, not run).
func Example() {
	node, err := network.NewNode(network.NodeConfig{}) // vmlet0, 198.19.118.0/24, /run/netns
	if err != nil {
		log.Fatal(err)
	}
	pod, err := node.CreatePod("0b5a7f9e-1c1d-4c7e-9a43-2f6f1d0c1a11") // the VMI UID
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := node.DeletePod(pod.ID); err != nil {
			log.Print(err)
		}
	}()

	spec := &network.Spec{
		UID:        pod.ID,
		Hostname:   "vm1",
		Interfaces: []network.Interface{{Name: "default", Binding: network.BindingMasquerade, Ports: []network.Port{{Port: 22}}}},
		Networks:   []network.Network{{Name: "default", Pod: true}},
		VCPUs:      2, MultiQueue: true,
	}
	att, err := network.Attach(pod.NetnsPath, spec, network.AttachOptions{
		ServeDHCP: true, // the node agent hands the sockets to the launcher instead (ListenDHCP)
		OnLease:   func(l network.Lease) { fmt.Println("guest", l.Interface, "has", l.Addr) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := att.Detach(); err != nil {
			log.Print(err)
		}
	}()

	fds, err := att.OpenTaps("default") // one queue per vCPU
	if err != nil {
		log.Fatal(err)
	}
	ip := att.Plan().Interfaces[0]
	vm, err := qemu.Start(context.Background(), &qemu.Spec{
		Name: "vm1", MemoryMiB: 256,
		NICs: []qemu.NIC{{ID: "net0", MAC: ip.MAC.String(), TapFDs: fds}},
	}, qemu.StartOptions{})
	for _, f := range fds {
		f.Close() // QEMU has its own copies
	}
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := vm.Kill(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := att.WaitLease(ctx, "default"); err != nil {
		log.Fatal(err)
	}
	for _, st := range att.Status(att.Leases()) { // for status.interfaces
		fmt.Println(st.Name, st.MAC, st.IPs, st.GuestIPs, st.Queues)
	}
}
