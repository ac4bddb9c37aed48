package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// OnLease is called (from a DHCP server goroutine) whenever a guest NIC is acknowledged an
	// address: the moment the guest's address is known.
	OnLease func(Lease)
	Logger  *slog.Logger
}

// Attachment is the network of one VM in its launcher's netns: the applied plan and one DHCP
// server per interface.
type Attachment struct {
	netns    string
	plan     *Plan
	servers  []*DHCPServer // DHCPv4, per interface
	servers6 []*DHCPServer // DHCPv6, per interface; nil entries without IPv6
	ras      []*RAServer
}

// Attach wires spec's interfaces in the launcher's network namespace at netnsPath: Discover,
// PlanBindings, ApplyPlan, then a DHCP server per interface. On failure everything it did is
// undone. Open the taps for QEMU with OpenTaps.
func Attach(netnsPath string, spec *Spec, opts AttachOptions) (_ *Attachment, err error) {
	st, err := Discover(netnsPath, spec)
	if err != nil {
		return nil, fmt.Errorf("attach network: %w", err)
	}
	plan, err := PlanBindings(spec, st)
	if err != nil {
		return nil, fmt.Errorf("attach network: %w", err)
	}
	r := &reverter{}
	defer func() { err = r.fail(err) }()
	if err := ApplyPlan(netnsPath, plan); err != nil {
		return nil, fmt.Errorf("attach network: %w", err)
	}
	r.add(func() error { return RemovePlan(netnsPath, plan) })
	a := &Attachment{netns: netnsPath, plan: plan}
	for _, ip := range plan.Interfaces {
		sopts := ServerOptions{Name: ip.Name, OnLease: opts.OnLease, Logger: opts.Logger}
		s, err := ServeDHCP(netnsPath, ip.DHCP, sopts)
		if err != nil {
			return nil, fmt.Errorf("attach network: %w", err)
		}
		r.add(s.Close)
		a.servers = append(a.servers, s)
		var s6 *DHCPServer
		if ip.DHCP6 != nil {
			if s6, err = ServeDHCPv6(netnsPath, *ip.DHCP6, sopts); err != nil {
				return nil, fmt.Errorf("attach network: %w", err)
			}
			r.add(s6.Close)
			ra, err := ServeRA(netnsPath, *ip.RA, opts.Logger)
			if err != nil {
				return nil, fmt.Errorf("attach network: %w", err)
			}
			r.add(ra.Close)
			a.ras = append(a.ras, ra)
		}
		a.servers6 = append(a.servers6, s6)
	}
	r.success()
	return a, nil
}

// Plan returns the applied plan.
func (a *Attachment) Plan() *Plan { return a.plan }

// OpenTaps opens the tap queues of interface name for QEMU (qemu.NIC.TapFDs); the caller
// closes them once QEMU has them.
func (a *Attachment) OpenTaps(name string) ([]*os.File, error) {
	ip, ok := a.iface(name)
	if !ok {
		return nil, fmt.Errorf("open taps of %s: %w", name, ErrUnknownNetwork)
	}
	return OpenTap(a.netns, ip.Tap, ip.Queues)
}

// WaitLease waits until the guest NIC name holds a DHCP lease.
func (a *Attachment) WaitLease(ctx context.Context, name string) (Lease, error) {
	for i, ip := range a.plan.Interfaces {
		if ip.Name == name {
			return a.servers[i].WaitLease(ctx)
		}
	}
	return Lease{}, fmt.Errorf("wait for lease of %s: %w", name, ErrUnknownNetwork)
}

// InterfaceStatus is what status.interfaces needs to know about one guest NIC.
type InterfaceStatus struct {
	Name         string
	MAC          string
	PodInterface string
	Queues       int
	// IPs are where the guest is reachable on the pod network: the pod addresses
	// (masquerade) or the leased pod address (bridge). Empty until the guest holds a lease.
	IPs []netip.Addr
	// GuestIPs are the addresses configured inside the guest (10.0.2.2 under masquerade).
	GuestIPs []netip.Addr
}

// Status reports every interface, with addresses once the guest holds its lease.
func (a *Attachment) Status() []InterfaceStatus {
	var out []InterfaceStatus
	for i, ip := range a.plan.Interfaces {
		st := InterfaceStatus{Name: ip.Name, MAC: ip.MAC.String(), PodInterface: ip.Pod.Name, Queues: ip.Queues}
		if l, ok := a.servers[i].Lease(); ok {
			st.GuestIPs = append(st.GuestIPs, l.Addr.Addr())
			if ip.Binding == BindingMasquerade {
				st.IPs = append(st.IPs, ip.Pod.Addr.Addr())
			} else {
				st.IPs = append(st.IPs, l.Addr.Addr())
			}
		}
		if s6 := a.servers6[i]; s6 != nil {
			if l, ok := s6.Lease(); ok {
				st.GuestIPs = append(st.GuestIPs, l.Addr.Addr())
				st.IPs = append(st.IPs, ip.Pod.Addr6.Addr())
			}
		}
		out = append(out, st)
	}
	return out
}

// Close stops the DHCP and router advertisement servers; the kernel state stays (a guest keeps
// its address until the lease expires). When the pod goes away, Close and then
// Node.DeletePod is the fast teardown: once nothing refers to the netns any more (QEMU exited,
// servers closed) the kernel destroys it with its taps, bridges and tables. Use Detach to
// remove the binding from a netns that stays.
func (a *Attachment) Close() error {
	var errs []error
	for _, s := range a.servers {
		errs = append(errs, s.Close())
	}
	for _, s := range a.servers6 {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	for _, s := range a.ras {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// WaitLease6 waits until the guest NIC name holds a DHCPv6 lease (IPv6 pods only).
func (a *Attachment) WaitLease6(ctx context.Context, name string) (Lease, error) {
	for i, ip := range a.plan.Interfaces {
		if ip.Name == name && a.servers6[i] != nil {
			return a.servers6[i].WaitLease(ctx)
		}
	}
	return Lease{}, fmt.Errorf("wait for ipv6 lease of %s: %w", name, ErrUnknownNetwork)
}

// Detach stops the DHCP servers and removes the plan from the netns (RemovePlan).
func (a *Attachment) Detach() error {
	return errors.Join(a.Close(), RemovePlan(a.netns, a.plan))
}

func (a *Attachment) iface(name string) (InterfacePlan, bool) {
	for _, ip := range a.plan.Interfaces {
		if ip.Name == name {
			return ip, true
		}
	}
	return InterfacePlan{}, false
}
