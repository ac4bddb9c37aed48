package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vmlet/vmlet/internal/revert"
)

// DHCPSockets are the bound sockets of one interface's DHCP service: DHCPv4, and with IPv6
// DHCPv6 and the raw ICMPv6 socket of the router advertisements. ListenDHCP makes them (root,
// inside the pod's netns); ServeLeasePlan serves them in any process, one without privileges
// included (binding port 67 or 547 and opening a raw socket need them, using the sockets does
// not), so the node agent can hand them to the VM's launcher as it hands over taps.
type DHCPSockets struct {
	DHCP  *os.File
	DHCP6 *os.File // nil without IPv6
	RA    *os.File // nil without IPv6
}

// Files lists the sockets in hand-over order: DHCP, then DHCP6 and RA if set.
func (s *DHCPSockets) Files() []*os.File {
	out := []*os.File{s.DHCP}
	if s.DHCP6 != nil {
		out = append(out, s.DHCP6, s.RA)
	}
	return out
}

// Close closes the sockets (a process that handed them over closes its copies).
func (s *DHCPSockets) Close() error {
	var errs []error
	for _, f := range []*os.File{s.DHCP, s.DHCP6, s.RA} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// SocketsFromFiles is the inverse of Files for plan p: it checks the count (the caller keeps
// the files on error).
func SocketsFromFiles(p *LeasePlan, files []*os.File) (*DHCPSockets, error) {
	if len(files) != p.sockets() {
		return nil, fmt.Errorf("dhcp sockets of %s: %w: %d files, want %d", p.Name, ErrInvalidSockets, len(files), p.sockets())
	}
	s := &DHCPSockets{DHCP: files[0]}
	if p.DHCP6 != nil {
		s.DHCP6, s.RA = files[1], files[2]
	}
	return s, nil
}

// ListenDHCP creates the sockets serving p takes in the network namespace at netnsPath, bound
// to the plan's bridge. Needs CAP_NET_BIND_SERVICE and CAP_NET_RAW there.
//
// Equivalent to: what dnsmasq and radvd bind at startup, before dropping privileges.
func ListenDHCP(netnsPath string, p *LeasePlan) (_ *DHCPSockets, err error) {
	s := &DHCPSockets{}
	r := revert.New()
	defer r.FailErr(&err)
	r.AddErr(s.Close)
	err = doInNetns(netnsPath, func() error {
		c4, err := listenDHCP(p.DHCP.Interface)
		if err != nil {
			return fmt.Errorf("dhcp: %w", err)
		}
		if s.DHCP, err = connFile(c4); err != nil {
			return err
		}
		if p.DHCP6 == nil {
			return nil
		}
		c6, err := listenDHCPv6(p.DHCP6.Interface)
		if err != nil {
			return fmt.Errorf("dhcpv6: %w", err)
		}
		if s.DHCP6, err = connFile(c6); err != nil {
			return err
		}
		cra, err := listenRA(p.RA.Interface)
		if err != nil {
			return fmt.Errorf("router advertisements: %w", err)
		}
		s.RA, err = connFile(cra)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen for dhcp of %s: %w", p.Name, err)
	}
	r.Success()
	return s, nil
}

// connFile returns a file of c's socket and closes c.
func connFile(c net.PacketConn) (*os.File, error) {
	defer c.Close()
	fc, ok := c.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, fmt.Errorf("socket file: %T has none", c)
	}
	return fc.File()
}

// DHCPService is one interface's DHCP: a DHCPv4 server and, with IPv6, a DHCPv6 server and
// router advertisements.
type DHCPService struct {
	plan  LeasePlan
	dhcp  *DHCPServer
	dhcp6 *DHCPServer // nil without IPv6
	ra    *RAServer   // nil without IPv6
}

// ServeLeasePlan serves p on socks, which the service owns from then on (closed by Close, or
// at once on error). It needs no privilege and works from any network namespace.
func ServeLeasePlan(p LeasePlan, socks *DHCPSockets, opts ServerOptions) (_ *DHCPService, err error) {
	opts.Name = p.Name
	files := socks.Files()
	defer closeAll(files) // net.FilePacketConn dups: the service holds its own
	if len(files) != p.sockets() {
		return nil, fmt.Errorf("serve dhcp of %s: %w: %d sockets, want %d", p.Name, ErrInvalidSockets, len(files), p.sockets())
	}
	conns := make([]net.PacketConn, 0, len(files))
	for _, f := range files {
		c, err := net.FilePacketConn(f)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("serve dhcp of %s: %w", p.Name, err)
		}
		conns = append(conns, c)
	}
	r := revert.New()
	defer r.FailErr(&err)
	for _, c := range conns {
		r.AddErr(c.Close)
	}
	c4, ok := conns[0].(*net.UDPConn)
	if !ok {
		return nil, fmt.Errorf("serve dhcp of %s: %w: the DHCPv4 socket is a %T", p.Name, ErrInvalidSockets, conns[0])
	}
	svc := &DHCPService{plan: p}
	if p.DHCP6 != nil {
		c6, ok := conns[1].(*net.UDPConn)
		if !ok {
			return nil, fmt.Errorf("serve dhcp of %s: %w: the DHCPv6 socket is a %T", p.Name, ErrInvalidSockets, conns[1])
		}
		if svc.ra, err = serveRAConn(conns[2], *p.RA, opts.Logger); err != nil {
			return nil, err
		}
		svc.dhcp6 = serveDHCPv6Conn(c6, *p.DHCP6, opts)
	}
	svc.dhcp = serveDHCPConn(c4, p.DHCP, opts)
	r.Success()
	return svc, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// Plan is the plan the service serves.
func (s *DHCPService) Plan() LeasePlan { return s.plan }

// Leases are the guest's current leases: DHCPv4 first, then DHCPv6.
func (s *DHCPService) Leases() []Lease {
	var out []Lease
	if l, ok := s.dhcp.Lease(); ok {
		out = append(out, l)
	}
	if s.dhcp6 != nil {
		if l, ok := s.dhcp6.Lease(); ok {
			out = append(out, l)
		}
	}
	return out
}

// WaitLease waits until the guest holds its DHCPv4 lease.
func (s *DHCPService) WaitLease(ctx context.Context) (Lease, error) {
	return s.dhcp.WaitLease(ctx)
}

// WaitLease6 waits until the guest holds its DHCPv6 lease; ErrNoIPv6 without IPv6.
func (s *DHCPService) WaitLease6(ctx context.Context) (Lease, error) {
	if s.dhcp6 == nil {
		return Lease{}, fmt.Errorf("wait for ipv6 lease of %s: %w", s.plan.Name, ErrNoIPv6)
	}
	return s.dhcp6.WaitLease(ctx)
}

// Close stops the servers and closes their sockets. Closing twice is fine.
func (s *DHCPService) Close() error {
	errs := []error{s.dhcp.Close()}
	if s.dhcp6 != nil {
		errs = append(errs, s.dhcp6.Close(), s.ra.Close())
	}
	return errors.Join(errs...)
}
