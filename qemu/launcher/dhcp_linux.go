package launcher

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vmlet/vmlet/network/dhcp"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// dhcpPool holds the DHCP services the launcher runs for its VM's interfaces, by interface
// name. They live as long as the launcher, whatever happens to the node agent that handed
// their sockets over.
type dhcpPool struct {
	mu  sync.Mutex
	svc map[string]*dhcp.DHCPService
}

// put serves name's plan on socks, replacing (closing) an earlier service of the same name.
func (p *dhcpPool) put(plan dhcp.LeasePlan, svc *dhcp.DHCPService) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.svc == nil {
		p.svc = map[string]*dhcp.DHCPService{}
	}
	if old := p.svc[plan.Name]; old != nil {
		_ = old.Close()
	}
	p.svc[plan.Name] = svc
}

// stop closes name's service; a name not served is fine.
func (p *dhcpPool) stop(name string) error {
	p.mu.Lock()
	svc := p.svc[name]
	delete(p.svc, name)
	p.mu.Unlock()
	if svc == nil {
		return nil
	}
	return svc.Close()
}

// snapshot lists the served interfaces (sorted) and the guest's current leases on them.
func (p *dhcpPool) snapshot() (names []string, leases []*pb.Lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, svc := range p.svc {
		names = append(names, name)
		for _, l := range svc.Leases() {
			leases = append(leases, leaseToProto(l))
		}
	}
	slices.Sort(names)
	slices.SortFunc(leases, func(a, b *pb.Lease) int {
		if a.GetInterface() != b.GetInterface() {
			return cmpString(a.GetInterface(), b.GetInterface())
		}
		return cmpString(a.GetAddress(), b.GetAddress())
	})
	return names, leases
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (p *dhcpPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, svc := range p.svc {
		_ = svc.Close()
	}
	p.svc = nil
}

func leaseToProto(l dhcp.Lease) *pb.Lease {
	return &pb.Lease{
		Interface: l.Interface, Mac: l.MAC.String(), Address: l.Addr.String(), Hostname: l.Hostname,
		AckedUnixNano: l.Acked.UnixNano(), ExpiresUnixNano: l.Expires.UnixNano(),
	}
}

// acceptDHCP serves a handed-over lease plan on its sockets (files, in LeasePlan order: DHCPv4,
// then DHCPv6 and router advertisements). Every acknowledged lease is an event.
func (l *Launcher) acceptDHCP(plan *dhcp.LeasePlan, files []*os.File) error {
	if plan.Name == "" {
		return fmt.Errorf("hand over dhcp: %w: no interface name", ErrInvalidRequest)
	}
	socks, err := dhcp.SocketsFromFiles(plan, files)
	if err != nil {
		return fmt.Errorf("hand over dhcp: %w: %w", ErrInvalidRequest, err)
	}
	svc, err := dhcp.ServeLeasePlan(*plan, socks, dhcp.ServerOptions{
		Logger:  l.log,
		OnLease: func(lease dhcp.Lease) { l.events.lease(leaseToProto(lease)) },
	})
	if err != nil {
		return fmt.Errorf("hand over dhcp: %w", err)
	}
	l.dhcp.put(*plan, svc)
	l.log.Info("serving dhcp", "interface", plan.Name, "bridge", plan.DHCP.Interface, "ipv6", plan.DHCP6 != nil)
	return nil
}

// HandOverDHCP gives the launcher serving socket (its Paths.TapSocket) the bound sockets of
// one interface's DHCP service and its lease plan; the launcher serves them until it exits
// or StopDHCP (a second hand-over of the same interface replaces the first). The caller keeps
// its copies (close them after). Equivalent to sendmsg(SCM_RIGHTS) of the fds.
func HandOverDHCP(ctx context.Context, socket string, plan dhcp.LeasePlan, socks *dhcp.DHCPSockets) error {
	if err := handOver(ctx, socket, handoffRequest{DHCP: &plan}, socks.Files()); err != nil {
		return fmt.Errorf("hand over dhcp of %s: %w", plan.Name, err)
	}
	return nil
}

// StopDHCP tells the launcher serving socket to stop serving DHCP on interface name (an
// unplugged NIC's); a name it does not serve is fine.
func StopDHCP(ctx context.Context, socket, name string) error {
	if err := handOver(ctx, socket, handoffRequest{StopDHCP: name}, nil); err != nil {
		return fmt.Errorf("stop dhcp of %s: %w", name, err)
	}
	return nil
}

// handOverTimeout bounds a hand-over whose context has no deadline.
const handOverTimeout = 10 * time.Second
