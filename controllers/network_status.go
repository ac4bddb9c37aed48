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
	"github.com/vmlet/vmlet/network"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Values of status.interfaces[].infoSource, as in KubeVirt.
const (
	infoSourceDomain         = "domain"
	infoSourceDomainAndAgent = "domain, guest-agent"
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
	info, err := g.c.GuestInfo(ctx, &pb.GuestInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("get guest info: %w", err)
	}
	var out []GuestInterface
	for _, i := range info.GetInterfaces() {
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
	return out, nil
}

// observeInterfaces writes status.interfaces from the VMI's attachment: per interface its
// name, MAC, pod interface and queues, and once the guest holds its DHCP lease the addresses
// it is reachable at on the pod network (the pod's under masquerade, the leased one under
// bridge; infoSource "domain"). When the guest agent reports the leased address on the NIC's
// MAC, the guest's interface name is added and infoSource says both agree. An agent restarted
// while the guest keeps its lease has not seen the lease: the addresses already in the status
// stay. Each change of an interface's addresses is an Event.
func (r *VMIReconciler) observeInterfaces(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) {
	if r.Network == nil {
		return
	}
	a := r.Network.attachment(vmi.UID)
	if a == nil {
		return
	}
	prev := map[string]vmletv1.VirtualMachineInstanceNetworkInterface{}
	for _, s := range vmi.Status.Interfaces {
		prev[s.Name] = s
	}
	sts := a.Status()
	out := make([]vmletv1.VirtualMachineInstanceNetworkInterface, 0, len(sts))
	needAgent := false
	for _, st := range sts {
		s := vmletv1.VirtualMachineInstanceNetworkInterface{
			Name: st.Name, MAC: st.MAC, PodInterfaceName: st.PodInterface,
			QueueCount: int32(st.Queues), InfoSource: infoSourceDomain, IPs: addrStrings(st.IPs),
		}
		p, seen := prev[st.Name]
		switch {
		case len(s.IPs) == 0 && seen && p.MAC == s.MAC:
			s.IPs, s.InterfaceName, s.InfoSource = p.IPs, p.InterfaceName, p.InfoSource
		case seen && p.MAC == s.MAC && slices.Equal(p.IPs, s.IPs) && p.InfoSource == infoSourceDomainAndAgent:
			s.InterfaceName, s.InfoSource = p.InterfaceName, p.InfoSource
		case len(st.GuestIPs) > 0:
			needAgent = true
		}
		if len(s.IPs) > 0 {
			s.IP = s.IPs[0]
		}
		out = append(out, s)
	}
	if needAgent && dom.AgentConnected {
		r.confirmByAgent(ctx, l, sts, out)
	}
	for _, s := range out {
		if p := prev[s.Name]; len(s.IPs) > 0 && !slices.Equal(p.IPs, s.IPs) {
			was := strings.Join(p.IPs, ", ")
			if was == "" {
				was = "none"
			}
			r.Recorder.Eventf(vmi, nil, "Normal", "AddressChanged", "ObserveNetwork",
				"interface %s: %s (was %s)", s.Name, strings.Join(s.IPs, ", "), was)
		}
	}
	vmi.Status.Interfaces = out
}

// confirmByAgent marks the interfaces whose leased guest address the guest agent reports on
// the same MAC. Best effort: an agent that does not answer leaves the domain's view.
func (r *VMIReconciler) confirmByAgent(ctx context.Context, l Launcher, sts []network.InterfaceStatus, out []vmletv1.VirtualMachineInstanceNetworkInterface) {
	gr, ok := l.(GuestNetworkReader)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, guestInfoTimeout)
	defer cancel()
	gis, err := gr.GuestInterfaces(ctx)
	if err != nil {
		log.FromContext(ctx).V(1).Info("guest agent did not report interfaces", "err", err)
		return
	}
	for i, st := range sts {
		for _, gi := range gis {
			if gi.MAC == strings.ToLower(st.MAC) && len(st.GuestIPs) > 0 && slices.Contains(gi.IPs, st.GuestIPs[0]) {
				out[i].InterfaceName, out[i].InfoSource = gi.Name, infoSourceDomainAndAgent
			}
		}
	}
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}
