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
	"github.com/vmlet/vmlet/network/dhcp"
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// ServeDHCP runs each interface's DHCP (and IPv6) servers in this process. Without it
	// nothing serves DHCP until the caller hands ListenDHCP's sockets and the interface's
	// LeasePlan to a process that serves them (the node agent: to the VM's launcher, so an
	// agent restart never leaves a guest without its DHCP server).
	ServeDHCP bool
	// OnLease is called (from a DHCP server goroutine) whenever a guest NIC is acknowledged an
	// address: the moment the guest's address is known. With ServeDHCP only.
	OnLease func(Lease)
	Logger  *slog.Logger
}

// Attachment is the network of one VM in its launcher's netns: per interface the applied
// plan and, with AttachOptions.ServeDHCP, its DHCP (and IPv6) servers. Interfaces can be added
// and removed while the VM runs (AddInterface, RemoveInterface). Methods are safe for
// concurrent use.
type Attachment struct {
	netns string
	opts  AttachOptions

	mu     sync.Mutex
	ifaces []*boundInterface
}

// boundInterface is one wired interface.
type boundInterface struct {
	plan InterfacePlan
	svc  *dhcp.DHCPService // nil without AttachOptions.ServeDHCP
}

// Attach wires spec's interfaces in the launcher's network namespace at netnsPath: Discover,
// PlanBindings, ApplyPlan, then (AttachOptions.ServeDHCP) a DHCP service per interface. On
// failure everything it did is undone. Open the taps for QEMU with OpenTaps, the DHCP sockets
// for another process with ListenDHCP.
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

// serve starts the DHCP service of an applied interface plan (AttachOptions.ServeDHCP).
func (a *Attachment) serve(ip InterfacePlan) (*boundInterface, error) {
	b := &boundInterface{plan: ip}
	if !a.opts.ServeDHCP {
		return b, nil
	}
	lp := ip.LeasePlan()
	socks, err := dhcp.ListenDHCP(a.netns, &lp)
	if err != nil {
		return nil, err
	}
	b.svc, err = dhcp.ServeLeasePlan(lp, socks, dhcp.ServerOptions{OnLease: a.opts.OnLease, Logger: a.opts.Logger})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ServeInProcess serves interface name's DHCP in this process, as AttachOptions.ServeDHCP
// does for every interface, unless it does already: for a VM whose launcher cannot take the
// sockets.
func (a *Attachment) ServeInProcess(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.find(name)
	if b == nil {
		return fmt.Errorf("serve dhcp of %s: %w", name, ErrUnknownNetwork)
	}
	if b.svc != nil {
		return nil
	}
	lp := b.plan.LeasePlan()
	socks, err := dhcp.ListenDHCP(a.netns, &lp)
	if err != nil {
		return err
	}
	b.svc, err = dhcp.ServeLeasePlan(lp, socks, dhcp.ServerOptions{OnLease: a.opts.OnLease, Logger: a.opts.Logger})
	return err
}

// close stops the interface's DHCP service, if it runs here.
func (b *boundInterface) close() error {
	if b.svc == nil {
		return nil
	}
	return b.svc.Close()
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

// ListenDHCP creates the bound DHCP sockets of interface name (dhcp.ListenDHCP) and
// returns them with the interface's lease plan, for a process that serves them
// (ServeLeasePlan). The caller closes its copies.
func (a *Attachment) ListenDHCP(name string) (*dhcp.DHCPSockets, LeasePlan, error) {
	a.mu.Lock()
	b := a.find(name)
	a.mu.Unlock()
	if b == nil {
		return nil, LeasePlan{}, fmt.Errorf("listen for dhcp of %s: %w", name, ErrUnknownNetwork)
	}
	lp := b.plan.LeasePlan()
	socks, err := dhcp.ListenDHCP(a.netns, &lp)
	return socks, lp, err
}

// WaitLease waits until the guest NIC name holds a DHCP lease (AttachOptions.ServeDHCP).
func (a *Attachment) WaitLease(ctx context.Context, name string) (Lease, error) {
	a.mu.Lock()
	b := a.find(name)
	a.mu.Unlock()
	if b == nil || b.svc == nil {
		return Lease{}, fmt.Errorf("wait for lease of %s: %w", name, ErrUnknownNetwork)
	}
	return b.svc.WaitLease(ctx)
}

// Leases are the current leases of the DHCP services running in this process
// (AttachOptions.ServeDHCP), for Status.
func (a *Attachment) Leases() []Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Lease
	for _, b := range a.ifaces {
		if b.svc != nil {
			out = append(out, b.svc.Leases()...)
		}
	}
	return out
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
	// PodIPs are the pod's addresses under masquerade, lease or not (where a guest that holds
	// a lease from another DHCP server, e.g. the migration source's, is reachable); empty
	// under bridge.
	PodIPs []netip.Addr
}

// Status reports every interface, with addresses once the guest holds its lease: leases are
// the guest's current leases, from Leases or from the process serving DHCP.
func (a *Attachment) Status(leases []Lease) []InterfaceStatus {
	return InterfaceStatuses(a.Plan(), leases)
}

// InterfaceStatuses reports every interface of plan, with addresses where leases (matched by
// interface name and family, and by the address the plan offers) say the guest holds its
// lease. Pure.
func InterfaceStatuses(plan *Plan, leases []Lease) []InterfaceStatus {
	var out []InterfaceStatus
	for _, ip := range plan.Interfaces {
		st := InterfaceStatus{Name: ip.Name, MAC: ip.MAC.String(), PodInterface: ip.Pod.Name, Queues: ip.Queues}
		if ip.Binding == BindingMasquerade {
			for _, a := range []netip.Prefix{ip.Pod.Addr, ip.Pod.Addr6} {
				if a.IsValid() {
					st.PodIPs = append(st.PodIPs, a.Addr())
				}
			}
		}
		if l, ok := findLease(leases, ip.Name, ip.DHCP.ClientAddr); ok {
			st.GuestIPs = append(st.GuestIPs, l.Addr.Addr())
			if ip.Binding == BindingMasquerade {
				st.IPs = append(st.IPs, ip.Pod.Addr.Addr())
			} else {
				st.IPs = append(st.IPs, l.Addr.Addr())
			}
		}
		if ip.DHCP6 != nil {
			if l, ok := findLease(leases, ip.Name, ip.DHCP6.ClientAddr); ok {
				st.GuestIPs = append(st.GuestIPs, l.Addr.Addr())
				st.IPs = append(st.IPs, ip.Pod.Addr6.Addr())
			}
		}
		out = append(out, st)
	}
	return out
}

func findLease(leases []Lease, name string, addr netip.Prefix) (Lease, bool) {
	for _, l := range leases {
		if l.Interface == name && l.Addr == addr {
			return l, true
		}
	}
	return Lease{}, false
}

// Close stops the DHCP and router advertisement servers running here; the kernel state stays (a guest keeps
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
	if b == nil || b.svc == nil {
		return Lease{}, fmt.Errorf("wait for ipv6 lease of %s: %w", name, ErrUnknownNetwork)
	}
	return b.svc.WaitLease6(ctx)
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
