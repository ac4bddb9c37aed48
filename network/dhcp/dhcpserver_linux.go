package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"golang.org/x/net/ipv6"
)

// DHCPServer serves one fixed lease on one in-netns bridge, by DHCPv4 (ServeDHCP) or DHCPv6
// (ServeDHCPv6; ServeLeasePlan for both on sockets bound by another process). It runs in the
// calling process: its socket was created inside the pod's netns, bound to the bridge, and
// keeps working from any goroutine and any namespace.
type DHCPServer struct {
	iface   string
	conn    *net.UDPConn
	handle  func(req []byte, peer net.Addr) dhcpResult
	onLease func(Lease)
	log     *slog.Logger
	done    chan struct{}

	mu      sync.Mutex
	lease   *Lease
	changed chan struct{} // closed and replaced whenever lease changes
	closed  bool
}

// ServerOptions configure ServeDHCP and ServeDHCPv6.
type ServerOptions struct {
	// Name is the interface's logical name, reported in leases.
	Name string
	// OnLease, if set, is called from the server's goroutine after every acknowledged lease.
	OnLease func(Lease)
	Logger  *slog.Logger
}

// ServeDHCP starts a DHCPv4 server for cfg in the network namespace at netnsPath. Close stops
// it.
//
// Equivalent to: a single-host `dnsmasq --dhcp-host=MAC,ADDR` bound to the bridge.
func ServeDHCP(netnsPath string, cfg DHCPConfig, opts ServerOptions) (*DHCPServer, error) {
	var conn *net.UDPConn
	err := doInNetns(netnsPath, func() (err error) {
		conn, err = listenDHCP(cfg.Interface)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start dhcp server on %s: %w", cfg.Interface, err)
	}
	return serveDHCPConn(conn, cfg, opts), nil
}

// listenDHCP binds the DHCPv4 server port on iface in the calling thread's namespace (needs
// CAP_NET_BIND_SERVICE and CAP_NET_RAW for SO_BINDTODEVICE; serving it needs neither).
func listenDHCP(iface string) (*net.UDPConn, error) {
	return server4.NewIPv4UDPConn(iface, &net.UDPAddr{Port: dhcpv4.ServerPort})
}

// serveDHCPConn serves cfg on conn, a socket bound by listenDHCP; the server owns it.
func serveDHCPConn(conn *net.UDPConn, cfg DHCPConfig, opts ServerOptions) *DHCPServer {
	handle := func(b []byte, peer net.Addr) dhcpResult { return handleDHCPv4(&cfg, opts.Name, b, peer, time.Now()) }
	return startServer(cfg.Interface, conn, handle, opts)
}

// ServeDHCPv6 starts a stateful DHCPv6 server for cfg in the network namespace at netnsPath
// (the address; the default route comes from router advertisements, see ServeRA). It joins
// ff02::1:2 on the bridge. Like ServeDHCP otherwise.
//
// Equivalent to: `dnsmasq --dhcp-range=ADDR,ADDR` in IPv6 stateful mode on the bridge.
func ServeDHCPv6(netnsPath string, cfg DHCPv6Config, opts ServerOptions) (*DHCPServer, error) {
	var conn *net.UDPConn
	err := doInNetns(netnsPath, func() (err error) {
		conn, err = listenDHCPv6(cfg.Interface)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start dhcpv6 server on %s: %w", cfg.Interface, err)
	}
	return serveDHCPv6Conn(conn, cfg, opts), nil
}

// listenDHCPv6 binds the DHCPv6 server port on iface in the calling thread's namespace and
// joins ff02::1:2 there.
func listenDHCPv6(iface string) (*net.UDPConn, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	conn, err := server6.NewIPv6UDPConn(iface, &net.UDPAddr{IP: net.IPv6unspecified, Port: dhcpv6.DefaultServerPort})
	if err != nil {
		return nil, err
	}
	group := &net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers}
	if err := ipv6.NewPacketConn(conn).JoinGroup(ifi, group); err != nil {
		conn.Close()
		return nil, fmt.Errorf("join %s: %w", group.IP, err)
	}
	return conn, nil
}

// serveDHCPv6Conn serves cfg on conn, a socket bound by listenDHCPv6; the server owns it.
func serveDHCPv6Conn(conn *net.UDPConn, cfg DHCPv6Config, opts ServerOptions) *DHCPServer {
	handle := func(b []byte, peer net.Addr) dhcpResult { return handleDHCPv6(&cfg, opts.Name, b, peer, time.Now()) }
	return startServer(cfg.Interface, conn, handle, opts)
}

func startServer(iface string, conn *net.UDPConn, handle func([]byte, net.Addr) dhcpResult, opts ServerOptions) *DHCPServer {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &DHCPServer{
		iface: iface, conn: conn, handle: handle, onLease: opts.OnLease,
		log:     log.With("dhcp", iface),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	go s.serve()
	return s
}

func (s *DHCPServer) serve() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		n, peer, err := s.conn.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("dhcp read failed", "err", err)
			}
			return
		}
		r := s.handle(buf[:n], peer)
		if r.event == eventRelease {
			s.setLease(nil)
		}
		if r.reply == nil {
			continue
		}
		if _, err := s.conn.WriteTo(r.reply, r.dst); err != nil {
			s.log.Warn("dhcp reply failed", "to", r.dst, "err", err)
			continue
		}
		if r.event == eventAcked {
			s.setLease(&r.lease)
			if s.onLease != nil {
				s.onLease(r.lease)
			}
		}
	}
}

func (s *DHCPServer) setLease(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease = l
	close(s.changed)
	s.changed = make(chan struct{})
}

// Lease returns the current lease, if the guest has one.
func (s *DHCPServer) Lease() (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return Lease{}, false
	}
	return *s.lease, true
}

// WaitLease waits until the guest holds a lease (returning at once if it does) or ctx ends.
func (s *DHCPServer) WaitLease(ctx context.Context) (Lease, error) {
	for {
		s.mu.Lock()
		l, ch, closed := s.lease, s.changed, s.closed
		s.mu.Unlock()
		if l != nil {
			return *l, nil
		}
		if closed {
			return Lease{}, fmt.Errorf("wait for lease on %s: %w", s.iface, ErrClosed)
		}
		select {
		case <-ch:
		case <-s.done:
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		case <-ctx.Done():
			return Lease{}, fmt.Errorf("wait for lease on %s: %w", s.iface, ctx.Err())
		}
	}
}

// Close stops the server and waits for its goroutine. Closing twice is fine.
func (s *DHCPServer) Close() error {
	s.conn.Close()
	<-s.done
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
