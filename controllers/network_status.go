package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/network"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Values of status.interfaces[].infoSource, as in KubeVirt.
const (
	infoSourceDomain         = "domain"
	infoSourceDomainAndAgent = "domain, guest-agent"
	infoSourceAgent          = "guest-agent"
)

// guestInfoTimeout bounds one read of the guest agent's view of the interfaces.
const guestInfoTimeout = 3 * time.Second

// GuestInterface is one interface as the guest agent reports it.
type GuestInterface struct {
	Name string // inside the guest, e.g. "eth0"
	MAC  string
	IPs  []netip.Addr
}

// GuestNetworkReader reads the guest's interfaces through its agent (the launcher's GuestInfo
// RPC, guest-network-get-interfaces). A Launcher without it reports interfaces from the
// domain side only.
type GuestNetworkReader interface {
	GuestInterfaces(ctx context.Context) ([]GuestInterface, error)
}

var _ GuestNetworkReader = (*grpcLauncher)(nil)

func (g *grpcLauncher) GuestInterfaces(ctx context.Context) ([]GuestInterface, error) {
	ctx, cancel := bound(ctx, callGuestInterfaces)
	defer cancel()
	info, err := g.c.GuestInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("get guest info: %w", err)
	}
	return guestInterfaces(info.GetInterfaces()), nil
}

// guestInterfaces converts the agent's interfaces (addresses as "addr/prefix" or "addr";
// malformed ones skipped).
func guestInterfaces(ifs []*pb.GuestInterface) []GuestInterface {
	var out []GuestInterface
	for _, i := range ifs {
		gi := GuestInterface{Name: i.GetName(), MAC: strings.ToLower(i.GetMac())}
		for _, a := range i.GetIpAddresses() {
			if p, err := netip.ParsePrefix(a); err == nil {
				gi.IPs = append(gi.IPs, p.Addr())
			} else if ip, err := netip.ParseAddr(a); err == nil {
				gi.IPs = append(gi.IPs, ip)
			}
		}
		out = append(out, gi)
	}
	return out
}

// observeInterfaces writes status.interfaces from the VMI's attachment and the leases its
// launcher's DHCP services report (interfaceStatuses),
// asking the guest agent only while some leased address is not yet confirmed by it, and
// records an Event for each change of an interface's addresses.
func (r *VMIReconciler) observeInterfaces(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) {
	if r.Network == nil {
		return
	}
	a := r.Network.attachment(vmi.UID)
	if a == nil {
		return
	}
	sts := a.Status(append(a.Leases(), dom.Leases...)) // a.Leases: for an older launcher
	out, needAgent := interfaceStatuses(vmi.Status.Interfaces, sts, nil)
	// A guest that arrived by migration may hold a lease the source gave it before the source
	// reported it: under masquerade the guest agent tells that it holds an address.
	unknown := migratedIn(vmi, r.NodeName) && slices.ContainsFunc(out, func(s vmletv1.VirtualMachineInstanceNetworkInterface) bool { return len(s.IPs) == 0 })
	var guest []GuestInterface
	switch {
	case !dom.AgentConnected:
	case dom.Guest != nil:
		guest = dom.Guest.Interfaces // the launcher's own poll: no agent round trip in this pass
	case needAgent || unknown:
		// A launcher that does not poll the agent (one that does reports a connected agent
		// only with guest_info, unless that first round failed).
		guest = r.guestInterfaces(ctx, l)
	}
	if guest != nil {
		out, _ = interfaceStatuses(vmi.Status.Interfaces, sts, guest)
		if unknown {
			out = configuredOnPod(out, sts, guest)
		}
	}
	out = withGuestOnly(out, vmi.Status.Interfaces, guest)
	for _, msg := range addressChanges(vmi.Status.Interfaces, out) {
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonAddressChanged), "ObserveNetwork", "%s", msg)
	}
	vmi.Status.Interfaces = out
}

// interfaceStatuses computes status.interfaces: per interface of the attachment its name, MAC,
// pod interface and queues, and once the guest holds its DHCP lease the addresses it is
// reachable at on the pod network (the pod's under masquerade, the leased one under bridge;
// infoSource "domain"). When guest (the guest agent's view; nil if not read) reports the
// leased address on the NIC's MAC, the guest's interface name is added and infoSource says
// both agree; a confirmation stays while the addresses do. An agent restarted while the guest
// keeps its leases has not seen them: the addresses in prev stay, per family (on a dual-stack
// pod the DHCPv4 and DHCPv6 leases are renewed at different times); under masquerade they are
// the pod's current addresses, which a migration to another node changed (the target's DHCP
// server has not seen the guest's leases either). needAgent reports a
// leased address the guest agent has not confirmed yet. It is pure.
func interfaceStatuses(prev []vmletv1.VirtualMachineInstanceNetworkInterface, sts []network.InterfaceStatus, guest []GuestInterface) (out []vmletv1.VirtualMachineInstanceNetworkInterface, needAgent bool) {
	byName := map[string]vmletv1.VirtualMachineInstanceNetworkInterface{}
	for _, s := range prev {
		byName[s.Name] = s
	}
	out = make([]vmletv1.VirtualMachineInstanceNetworkInterface, 0, len(sts))
	for _, st := range sts {
		s := vmletv1.VirtualMachineInstanceNetworkInterface{
			Name: st.Name, MAC: st.MAC, PodInterfaceName: st.PodInterface,
			QueueCount: int32(st.Queues), InfoSource: infoSourceDomain, IPs: addrStrings(st.IPs),
		}
		p, seen := byName[st.Name]
		seen = seen && p.MAC == s.MAC
		if seen && len(s.IPs) > 0 {
			s.IPs = keepFamilies(p.IPs, s.IPs)
		}
		switch {
		case len(s.IPs) == 0 && seen:
			s.IPs, s.InterfaceName, s.InfoSource = onPod(p.IPs, st.PodIPs), p.InterfaceName, p.InfoSource
		case len(s.IPs) == 0:
		case seen && slices.Equal(p.IPs, s.IPs) && p.InfoSource == infoSourceDomainAndAgent:
			s.InterfaceName, s.InfoSource = p.InterfaceName, p.InfoSource
		case agentConfirms(guest, st):
			s.InterfaceName, s.InfoSource = agentName(guest, st), infoSourceDomainAndAgent
		default:
			needAgent = true
		}
		if len(s.IPs) > 0 {
			s.IP = s.IPs[0]
		}
		out = append(out, s)
	}
	return out, needAgent
}

// withGuestOnly appends to out the interfaces the guest agent reports that are none of the
// domain's (no interface of out has their MAC; lo left out, as KubeVirt's agent poller does):
// infoSource "guest-agent", the guest's name and addresses, IPv4 first (the first is IP). guest nil (no current view of the agent) keeps those of prev. Pure.
func withGuestOnly(out, prev []vmletv1.VirtualMachineInstanceNetworkInterface, guest []GuestInterface) []vmletv1.VirtualMachineInstanceNetworkInterface {
	if guest == nil {
		for _, p := range prev {
			if p.InfoSource == infoSourceAgent {
				out = append(out, p)
			}
		}
		return out
	}
	for _, gi := range guest {
		if gi.Name == "lo" || slices.ContainsFunc(out, func(s vmletv1.VirtualMachineInstanceNetworkInterface) bool {
			return gi.MAC != "" && strings.EqualFold(s.MAC, gi.MAC)
		}) {
			continue
		}
		ips := slices.Clone(gi.IPs)
		slices.SortStableFunc(ips, func(a, b netip.Addr) int { return boolInt(b.Is4()) - boolInt(a.Is4()) })
		s := vmletv1.VirtualMachineInstanceNetworkInterface{MAC: gi.MAC, InterfaceName: gi.Name, InfoSource: infoSourceAgent, IPs: addrStrings(ips)}
		if len(s.IPs) > 0 {
			s.IP = s.IPs[0]
		}
		out = append(out, s)
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// onPod is where a guest that kept its leases (prev, the addresses reported before) is reachable
// now: under masquerade the pod's addresses (pod) of prev's families, which differ from prev's
// once the guest migrated to another pod; prev as it is under bridge (pod empty).
func onPod(prev []string, pod []netip.Addr) []string {
	if len(pod) == 0 {
		return prev
	}
	out := make([]string, 0, len(prev))
	for _, a := range prev {
		ip, err := netip.ParseAddr(a)
		i := slices.IndexFunc(pod, func(p netip.Addr) bool { return err == nil && p.Is4() == ip.Is4() })
		if i >= 0 {
			a = pod[i].String()
		}
		out = append(out, a)
	}
	return out
}

// keepFamilies adds to cur the addresses of prev whose family (IPv4, IPv6) cur has none of,
// IPv4 first.
func keepFamilies(prev, cur []string) []string {
	family := func(a string) int {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is4() {
			return 4
		}
		return 6
	}
	has := map[int]bool{}
	for _, a := range cur {
		has[family(a)] = true
	}
	out := slices.Clone(cur)
	for _, a := range prev {
		if !has[family(a)] {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return family(a) - family(b) })
	return out
}

// agentConfirms reports whether the guest agent shows the leased guest address on st's MAC.
func agentConfirms(guest []GuestInterface, st network.InterfaceStatus) bool {
	return agentName(guest, st) != ""
}

// agentName is the guest's name of the interface that has st's MAC and leased address.
func agentName(guest []GuestInterface, st network.InterfaceStatus) string {
	if len(st.GuestIPs) == 0 {
		return ""
	}
	for _, gi := range guest {
		if strings.EqualFold(gi.MAC, st.MAC) && slices.Contains(gi.IPs, st.GuestIPs[0]) {
			return gi.Name
		}
	}
	return ""
}

// addressChanges describes each interface whose addresses changed from prev to cur (a new
// address included; an interface losing its addresses is not an address change).
func addressChanges(prev, cur []vmletv1.VirtualMachineInstanceNetworkInterface) []string {
	was := map[string][]string{}
	for _, p := range prev {
		was[p.Name] = p.IPs
	}
	var msgs []string
	for _, s := range cur {
		if len(s.IPs) == 0 || slices.Equal(was[s.Name], s.IPs) {
			continue
		}
		before := strings.Join(was[s.Name], ", ")
		if before == "" {
			before = "none"
		}
		msgs = append(msgs, fmt.Sprintf("interface %s: %s (was %s)", s.Name, strings.Join(s.IPs, ", "), before))
	}
	return msgs
}

// guestInterfaces reads the guest agent's view of the interfaces; nil when the launcher cannot
// or the agent does not answer (best effort: the domain's view stands).
func (r *VMIReconciler) guestInterfaces(ctx context.Context, l Launcher) []GuestInterface {
	gr, ok := l.(GuestNetworkReader)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, guestInfoTimeout)
	defer cancel()
	gis, err := gr.GuestInterfaces(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("guest agent did not report interfaces", "err", err)
		return nil
	}
	return gis
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// migratedIn says whether the vmi arrived on node by a migration.
func migratedIn(vmi *vmletv1.VirtualMachineInstance, node string) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.Completed && ms.TargetNode == node && vmi.Status.NodeName == node
}

// configuredOnPod fills in, for masquerade interfaces without addresses (no lease seen here and
// none reported before), the pod's addresses of each family in which the guest agent shows the
// NIC (by MAC) configured: the guest holds a lease, from a DHCP server on another node. Pure.
func configuredOnPod(out []vmletv1.VirtualMachineInstanceNetworkInterface, sts []network.InterfaceStatus, guest []GuestInterface) []vmletv1.VirtualMachineInstanceNetworkInterface {
	for i := range out {
		if len(out[i].IPs) > 0 || i >= len(sts) || len(sts[i].PodIPs) == 0 {
			continue
		}
		for _, gi := range guest {
			if !strings.EqualFold(gi.MAC, out[i].MAC) {
				continue
			}
			var ips []string
			for _, p := range sts[i].PodIPs {
				if slices.ContainsFunc(gi.IPs, func(a netip.Addr) bool { return a.Is4() == p.Is4() && !a.IsLinkLocalUnicast() }) {
					ips = append(ips, p.String())
				}
			}
			if len(ips) > 0 {
				out[i].IPs, out[i].IP = ips, ips[0]
				out[i].InterfaceName, out[i].InfoSource = gi.Name, infoSourceDomainAndAgent
			}
		}
	}
	return out
}
