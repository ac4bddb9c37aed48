package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// maxNICQueues is the most queue pairs qemu.Spec.Validate accepts per NIC. KubeVirt caps the
// queues of networkInterfaceMultiqueue at its own tap limit the same way (it logs, the VMI runs).
const maxNICQueues = 16

// HotNIC is an interface of a secondary network, plugged into the running domain.
type HotNIC struct {
	// Name is the interface's (and its network's) name.
	Name string
	// PodInterface is its pod interface in the launcher's netns.
	PodInterface string
	// NIC is the guest NIC as planned (the MAC may be replaced by the binding's, as for NICs).
	NIC qemu.NIC
}

// BootNetwork is the part of Network wired before the domain starts: the pod network's
// interface. It is nil when Network is.
func (d *Desired) BootNetwork() *network.Spec {
	if d.Network == nil {
		return nil
	}
	var names []string
	for _, ifc := range d.Network.Interfaces {
		if !slices.ContainsFunc(d.HotplugNICs, func(h HotNIC) bool { return h.Name == ifc.Name }) {
			names = append(names, ifc.Name)
		}
	}
	return d.Network.Select(names...)
}

// BootInterfaces are the names of BootNetwork's interfaces.
func (d *Desired) BootInterfaces() []string {
	if d.Network == nil {
		return nil
	}
	var names []string
	for _, ifc := range d.BootNetwork().Interfaces {
		names = append(names, ifc.Name)
	}
	return names
}

// vmiNetwork is a VMI's network translated for this node (Desired's Network, Spec.NICs and
// HotplugNICs).
type vmiNetwork struct {
	// spec is nil when the guest has no interfaces.
	spec *network.Spec
	// nics are the guest NICs the domain starts with: the pod network's interface, in
	// interface order. Their tap names, queues and MACs are the ones the binding plan will
	// have, except the MAC of a bridge binding without macAddress: the guest takes over the
	// pod interface's MAC (as in KubeVirt), known once attached, so it is planned as a
	// generated one here and ResolveNICs replaces it.
	nics []qemu.NIC
	// hot are the interfaces of multus (secondary) networks.
	hot []HotNIC
}

// translateNetwork translates the VMI's interfaces and networks (with KubeVirt's defaults: one
// bridge interface on the pod network when the spec lists neither and autoattachPodInterface
// is not false; see vmletv1.EffectiveNetworks) into the network binding spec and the guest
// NICs. Problems are *SpecError values: ErrUnsupported for what vmlet cannot do,
// else an invalid value.
func translateNetwork(vmi *vmletv1.VirtualMachineInstance) (*vmiNetwork, error) {
	ifaces, nets := vmletv1.EffectiveNetworks(&vmi.Spec)
	if err := networksUsed(ifaces, nets); err != nil {
		return nil, err
	}
	ifaces, nets = presentOnly(ifaces, nets)
	if len(ifaces) == 0 {
		return &vmiNetwork{}, nil
	}
	d := &vmi.Spec.Domain
	vcpus := 1
	if d.CPU != nil {
		vcpus = qemu.CPU{Sockets: int(d.CPU.Sockets), Cores: int(d.CPU.Cores), Threads: int(d.CPU.Threads)}.VCPUs()
	}
	s := &network.Spec{
		UID:        string(vmi.UID),
		Hostname:   guestHostname(vmi),
		VCPUs:      min(vcpus, maxNICQueues),
		MultiQueue: d.Devices.NetworkInterfaceMultiQueue != nil && *d.Devices.NetworkInterfaceMultiQueue,
	}
	for i, n := range nets {
		nn, err := podNetwork(i, n)
		if err != nil {
			return nil, err
		}
		s.Networks = append(s.Networks, nn)
	}
	for i, ifc := range ifaces {
		ni, err := guestInterface(i, ifc)
		if err != nil {
			return nil, err
		}
		s.Interfaces = append(s.Interfaces, ni)
	}
	if err := s.Validate(); err != nil {
		return nil, networkSpecError(err)
	}
	out := &vmiNetwork{spec: s}
	for i, ni := range s.Interfaces { // in ifaces' order
		mac := ni.MAC
		if mac == "" {
			mac = network.GenerateMAC(s.UID, ni.Name).String()
		}
		n := s.Networks[slices.IndexFunc(s.Networks, func(n network.Network) bool { return n.Name == ni.Name })] // validated
		podIf := network.PodInterfaceOf(n)
		nic := qemu.NIC{ID: NICID(ni.Name), MAC: mac, TapName: network.TapName(podIf), Queues: planQueues(s)}
		if b := ifaces[i].BootOrder; b != nil {
			nic.BootIndex = int(*b) // network boot through the NIC's option ROM (iPXE)
		}
		if n.Pod {
			out.nics = append(out.nics, nic)
		} else {
			out.hot = append(out.hot, HotNIC{Name: ni.Name, PodInterface: podIf, NIC: nic})
		}
	}
	return out, nil
}

// presentOnly drops interfaces with state: absent, and their networks.
func presentOnly(ifaces []vmletv1.Interface, nets []vmletv1.Network) ([]vmletv1.Interface, []vmletv1.Network) {
	absent := map[string]bool{}
	var outI []vmletv1.Interface
	for _, ifc := range ifaces {
		if ifc.State == vmletv1.InterfaceStateAbsent {
			absent[ifc.Name] = true
			continue
		}
		outI = append(outI, ifc)
	}
	var outN []vmletv1.Network
	for _, n := range nets {
		if !absent[n.Name] {
			outN = append(outN, n)
		}
	}
	return outI, outN
}

// networksUsed rejects a network that no interface uses, as KubeVirt does (the interfaces'
// own references are checked by network.Spec.Validate).
func networksUsed(ifaces []vmletv1.Interface, nets []vmletv1.Network) error {
	used := map[string]bool{}
	for _, ifc := range ifaces {
		used[ifc.Name] = true
	}
	for i, n := range nets {
		if !used[n.Name] {
			return &SpecError{Field: fmt.Sprintf("spec.networks[%d].name", i), Reason: fmt.Sprintf("network %q has no interface of its name", n.Name)}
		}
	}
	return nil
}

func podNetwork(i int, n vmletv1.Network) (network.Network, error) {
	field := fmt.Sprintf("spec.networks[%d]", i)
	if n.Multus != nil {
		return network.Network{Name: n.Name, Attachment: n.Multus.NetworkName}, nil
	}
	if n.Pod == nil {
		return network.Network{}, &SpecError{Field: field, Reason: fmt.Sprintf("network %q: only pod and multus networks are supported", n.Name), Err: ErrUnsupported}
	}
	nn := network.Network{Name: n.Name, Pod: true}
	var err error
	if c := n.Pod.VMNetworkCIDR; c != "" {
		if nn.GuestCIDR, err = netip.ParsePrefix(c); err != nil {
			return nn, &SpecError{Field: field + ".pod.vmNetworkCIDR", Reason: fmt.Sprintf("%q is not a CIDR", c)}
		}
	}
	if c := n.Pod.VMIPv6NetworkCIDR; c != "" {
		if nn.GuestCIDR6, err = netip.ParsePrefix(c); err != nil {
			return nn, &SpecError{Field: field + ".pod.vmIPv6NetworkCIDR", Reason: fmt.Sprintf("%q is not a CIDR", c)}
		}
	}
	return nn, nil
}

func guestInterface(i int, ifc vmletv1.Interface) (network.Interface, error) {
	field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
	unsupported := func(sub, reason string) error {
		return &SpecError{Field: field + sub, Reason: fmt.Sprintf("interface %q: %s", ifc.Name, reason), Err: ErrUnsupported}
	}
	switch {
	case ifc.Model != "" && ifc.Model != "virtio":
		return network.Interface{}, unsupported(".model", fmt.Sprintf("model %s is not supported (virtio is)", ifc.Model))
	case ifc.PciAddress != "":
		return network.Interface{}, unsupported(".pciAddress", "fixed PCI addresses are not supported")
	}
	ni := network.Interface{Name: ifc.Name, Binding: network.BindingBridge}
	if ifc.Binding() == vmletv1.BindingMasquerade {
		ni.Binding = network.BindingMasquerade
	}
	if ifc.MacAddress != "" {
		// QEMU wants lower-case colon form; KubeVirt also accepts dashes and upper case.
		mac, err := network.ParseMAC(ifc.MacAddress)
		if err != nil {
			return ni, &SpecError{Field: field + ".macAddress", Reason: fmt.Sprintf("interface %q: %v", ifc.Name, err), Err: err}
		}
		ni.MAC = mac.String()
	}
	for _, p := range ifc.Ports {
		ni.Ports = append(ni.Ports, network.Port{Name: p.Name, Protocol: network.Protocol(p.Protocol), Port: int(p.Port)})
	}
	return ni, nil
}

// networkSpecError turns the first of network.Spec.Validate's field errors into a SpecError on
// the VMI's field. The network spec lists interfaces and networks in the VMI's order, so the
// indexes carry over.
func networkSpecError(err error) error {
	var fe *network.FieldError
	if !errors.As(err, &fe) {
		return &SpecError{Field: "spec", Reason: err.Error(), Err: err}
	}
	field := "spec"
	switch {
	case strings.HasPrefix(fe.Field, "interfaces"):
		field = "spec.domain.devices." + fe.Field
	case strings.HasPrefix(fe.Field, "networks"):
		field = "spec." + strings.NewReplacer(".guestCIDR6", ".pod.vmIPv6NetworkCIDR", ".guestCIDR", ".pod.vmNetworkCIDR").Replace(fe.Field)
	}
	reason := fmt.Sprintf("%q: %v", fe.Value, fe.Err)
	if fe.Detail != "" {
		reason += ": " + fe.Detail
	}
	return &SpecError{Field: field, Reason: reason, Err: fe}
}

// planQueues is the tap queue pairs of every NIC, as network's plan computes them.
func planQueues(s *network.Spec) int {
	if !s.MultiQueue || s.VCPUs <= 1 {
		return 1
	}
	return min(s.VCPUs, network.MaxQueues)
}

// guestHostname is what DHCP offers the guest, as in KubeVirt: spec.hostname, else the first
// label of the VMI's name, at most 63 characters.
func guestHostname(vmi *vmletv1.VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	h, _, _ := strings.Cut(vmi.Name, ".")
	return h[:min(len(h), 63)]
}

var nicIDRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,27}$`)

// NICID is the QEMU id of the guest NIC of interface name: "net-" + name when that fits QEMU's
// id rules ([a-z][a-z0-9-]{0,27}), else its first 19 characters and 8 hex digits of the name's
// SHA-256. The "net-" prefix keeps it apart from disk ids, which are volume names.
func NICID(name string) string {
	id := "net-" + name
	if nicIDRe.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(id[:min(len(id), 19)], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// ResolveNICs returns the NICs to start the domain with once the network is attached: the
// planned ones with the tap names, queues and MACs of the attachment's plan, and the network
// namespace each NIC's tap lives in (the launcher opens the taps there). It is pure.
func ResolveNICs(planned []qemu.NIC, plan *network.Plan, netnsPath string) ([]qemu.NIC, launcher.NetNS, error) {
	if len(planned) != len(plan.Interfaces) {
		return nil, nil, fmt.Errorf("resolve nics: %d planned, %d attached", len(planned), len(plan.Interfaces))
	}
	nics := make([]qemu.NIC, len(planned))
	ns := launcher.NetNS{}
	for i, ip := range plan.Interfaces {
		n := planned[i]
		if n.ID != NICID(ip.Name) {
			return nil, nil, fmt.Errorf("resolve nics: nic %s is not interface %s", n.ID, ip.Name)
		}
		n.MAC, n.TapName, n.Queues = ip.MAC.String(), ip.Tap, ip.Queues
		nics[i] = n
		ns[n.ID] = netnsPath
	}
	return nics, ns, nil
}
