package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/vmlet/vmlet/internal/revert"
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// OnLease is called (from a DHCP server goroutine) whenever a guest NIC is acknowledged an
	// address: the moment the guest's address is known.
	OnLease func(Lease)
	Logger  *slog.Logger
}

// Attachment is the network of one VM in its launcher's netns: per interface the applied
// plan and its DHCP (and IPv6) servers. Interfaces can be added and removed while the VM runs
// (AddInterface, RemoveInterface). Methods are safe for concurrent use.
type Attachment struct {
	netns string
	opts  AttachOptions

	mu     sync.Mutex
	ifaces []*boundInterface
}

// boundInterface is one wired interface.
type boundInterface struct {
	plan  InterfacePlan
	dhcp  *DHCPServer
	dhcp6 *DHCPServer // nil without IPv6
	ra    *RAServer   // nil without IPv6
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
	r := revert.New()
	defer r.FailErr(&err)
	if err := ApplyPlan(netnsPath, plan); err != nil {
		return nil, fmt.Errorf("attach network: %w", err)
	}
	r.AddErr(func() error { return RemovePlan(netnsPath, plan) })
	a := &Attachment{netns: netnsPath, opts: opts}
	for _, ip := range plan.Interfaces {
		b, err := a.serve(ip)
		if err != nil {
			return nil, fmt.Errorf("attach network: %w", err)
		}
		r.AddErr(b.close)
		a.ifaces = append(a.ifaces, b)
	}
	r.Success()
	return a, nil
}

// serve starts the DHCP (and IPv6) servers of an applied interface plan.
func (a *Attachment) serve(ip InterfacePlan) (_ *boundInterface, err error) {
	r := revert.New()
	defer r.FailErr(&err)
	sopts := ServerOptions{Name: ip.Name, OnLease: a.opts.OnLease, Logger: a.opts.Logger}
	b := &boundInterface{plan: ip}
	if b.dhcp, err = ServeDHCP(a.netns, ip.DHCP, sopts); err != nil {
		return nil, err
	}
	r.AddErr(b.dhcp.Close)
	if ip.DHCP6 != nil {
		if b.dhcp6, err = ServeDHCPv6(a.netns, *ip.DHCP6, sopts); err != nil {
			return nil, err
		}
		r.AddErr(b.dhcp6.Close)
		if b.ra, err = ServeRA(a.netns, *ip.RA, a.opts.Logger); err != nil {
			return nil, err
		}
	}
	r.Success()
	return b, nil
}

// close stops the interface's servers.
func (b *boundInterface) close() error {
	errs := []error{b.dhcp.Close()}
	if b.dhcp6 != nil {
		errs = append(errs, b.dhcp6.Close())
	}
	if b.ra != nil {
		errs = append(errs, b.ra.Close())
	}
	return errors.Join(errs...)
}

// AddInterface wires interface name of spec (a spec that also lists the interfaces already
// attached; only name's network is looked at in the netns) while the VM runs: Discover its pod
// interface, plan, apply, serve DHCP. It returns the interface's plan (tap, queues, guest MAC
// for QEMU). Adding an interface that is attached already returns its plan and changes
// nothing. On failure everything it did is undone.
func (a *Attachment) AddInterface(spec *Spec, name string) (_ InterfacePlan, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b := a.find(name); b != nil {
		return b.plan, nil
	}
	one := spec.Select(name)
	if len(one.Interfaces) != 1 {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, ErrUnknownNetwork)
	}
	if err := spec.Validate(); err != nil {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, err)
	}
	st, err := Discover(a.netns, one)
	if err != nil {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, err)
	}
	plan, err := PlanBindings(one, st)
	if err != nil {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, err)
	}
	ip := plan.Interfaces[0]
	for _, b := range a.ifaces {
		if b.plan.Bridge == ip.Bridge || b.plan.Tap == ip.Tap || b.plan.Table.Name == ip.Table.Name && b.plan.Table.Family == ip.Table.Family {
			return InterfacePlan{}, fmt.Errorf("add interface %s: %w: its links or table would be those of %s", name, ErrDuplicateInterface, b.plan.Name)
		}
	}
	r := revert.New()
	defer r.FailErr(&err)
	if err := ApplyPlan(a.netns, plan); err != nil {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, err)
	}
	r.AddErr(func() error { return RemovePlan(a.netns, plan) })
	b, err := a.serve(ip)
	if err != nil {
		return InterfacePlan{}, fmt.Errorf("add interface %s: %w", name, err)
	}
	r.Success()
	a.ifaces = append(a.ifaces, b)
	return ip, nil
}

// RemoveInterface unwires interface name (stops its servers, removes its plan from the
// netns). A name this attachment does not know is looked for in the netns by the alias of
// the links its binding made (an agent restarted since it was added): those links and the
// binding's table go. Missing parts are fine.
func (a *Attachment) RemoveInterface(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, b := range a.ifaces {
		if b.plan.Name != name {
			continue
		}
		err := errors.Join(b.close(), RemovePlan(a.netns, &Plan{Interfaces: []InterfacePlan{b.plan}}))
		if err != nil {
			return fmt.Errorf("remove interface %s: %w", name, err)
		}
		a.ifaces = slices.Delete(a.ifaces, i, i+1)
		return nil
	}
	if err := removeOrphan(a.netns, name); err != nil {
		return fmt.Errorf("remove interface %s: %w", name, err)
	}
	return nil
}

// Interfaces lists the names of the attached interfaces, and of bindings found in the netns
// that this attachment did not make (left by an earlier agent), so callers can remove what is
// no longer wanted.
func (a *Attachment) Interfaces() ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	names, err := boundNames(a.netns)
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, b := range a.ifaces {
		if !slices.Contains(names, b.plan.Name) {
			names = append(names, b.plan.Name)
		}
	}
	return names, nil
}

func (a *Attachment) find(name string) *boundInterface {
	for _, b := range a.ifaces {
		if b.plan.Name == name {
			return b
		}
	}
	return nil
}

// Plan returns the applied plan.
func (a *Attachment) Plan() *Plan {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &Plan{}
	for _, b := range a.ifaces {
		p.Interfaces = append(p.Interfaces, b.plan)
	}
	return p
}

// OpenTaps opens the tap queues of interface name for QEMU (qemu.NIC.TapFDs); the caller
// closes them once QEMU has them.
func (a *Attachment) OpenTaps(name string) ([]*os.File, error) {
	a.mu.Lock()
	b := a.find(name)
	a.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("open taps of %s: %w", name, ErrUnknownNetwork)
	}
	return OpenTap(a.netns, b.plan.Tap, b.plan.Queues)
}

// WaitLease waits until the guest NIC name holds a DHCP lease.
func (a *Attachment) WaitLease(ctx context.Context, name string) (Lease, error) {
	a.mu.Lock()
	b := a.find(name)
	a.mu.Unlock()
	if b == nil {
		return Lease{}, fmt.Errorf("wait for lease of %s: %w", name, ErrUnknownNetwork)
	}
	return b.dhcp.WaitLease(ctx)
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
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []InterfaceStatus
	for _, b := range a.ifaces {
		ip := b.plan
		st := InterfaceStatus{Name: ip.Name, MAC: ip.MAC.String(), PodInterface: ip.Pod.Name, Queues: ip.Queues}
		if l, ok := b.dhcp.Lease(); ok {
			st.GuestIPs = append(st.GuestIPs, l.Addr.Addr())
			if ip.Binding == BindingMasquerade {
				st.IPs = append(st.IPs, ip.Pod.Addr.Addr())
			} else {
				st.IPs = append(st.IPs, l.Addr.Addr())
			}
		}
		if b.dhcp6 != nil {
			if l, ok := b.dhcp6.Lease(); ok {
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
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, b := range a.ifaces {
		errs = append(errs, b.close())
	}
	return errors.Join(errs...)
}

// WaitLease6 waits until the guest NIC name holds a DHCPv6 lease (IPv6 pods only).
func (a *Attachment) WaitLease6(ctx context.Context, name string) (Lease, error) {
	a.mu.Lock()
	b := a.find(name)
	a.mu.Unlock()
	if b == nil || b.dhcp6 == nil {
		return Lease{}, fmt.Errorf("wait for ipv6 lease of %s: %w", name, ErrUnknownNetwork)
	}
	return b.dhcp6.WaitLease(ctx)
}

// Detach stops the DHCP servers and removes the plan from the netns (RemovePlan).
func (a *Attachment) Detach() error {
	return errors.Join(a.Close(), RemovePlan(a.netns, a.Plan()))
}

func (a *Attachment) iface(name string) (InterfacePlan, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b := a.find(name); b != nil {
		return b.plan, true
	}
	return InterfacePlan{}, false
}
