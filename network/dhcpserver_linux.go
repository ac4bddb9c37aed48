package network

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
)

// DHCPServer serves one fixed lease on one in-netns bridge. It runs in the calling process:
// its socket is created inside the launcher's netns (bound to the bridge, port 67) and keeps
// working from any goroutine.
type DHCPServer struct {
	name    string
	cfg     DHCPConfig
	conn    *net.UDPConn
	onLease func(Lease)
	log     *slog.Logger
	done    chan struct{}

	mu      sync.Mutex
	lease   *Lease
	changed chan struct{} // closed and replaced whenever lease changes
	closed  bool
}

// ServeDHCP starts a DHCP server for cfg in the network namespace at netnsPath. name is the
// interface's logical name (reported in leases). onLease, if not nil, is called (from the
// server's goroutine) after every ACK. Close stops it.
//
// Equivalent to: a single-host `dnsmasq --dhcp-host=MAC,ADDR` bound to the bridge.
func ServeDHCP(netnsPath, name string, cfg DHCPConfig, onLease func(Lease), log *slog.Logger) (*DHCPServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var conn *net.UDPConn
	err := doInNetns(netnsPath, func() error {
		var err error
		conn, err = server4.NewIPv4UDPConn(cfg.Interface, &net.UDPAddr{Port: dhcpv4.ServerPort})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start dhcp server on %s: %w", cfg.Interface, err)
	}
	s := &DHCPServer{
		name: name, cfg: cfg, conn: conn, onLease: onLease,
		log:     log.With("dhcp", cfg.Interface),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	go s.serve()
	return s, nil
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
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			s.log.Debug("dhcp: ignoring malformed packet", "err", err)
			continue
		}
		reply, ev := dhcpReply(&s.cfg, req)
		if ev == eventRelease {
			s.setLease(nil)
		}
		if reply == nil {
			continue
		}
		dst := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
		if up, ok := peer.(*net.UDPAddr); ok && !up.IP.IsUnspecified() && up.IP.To4() != nil {
			dst = up // a bound client renewing by unicast
		}
		if _, err := s.conn.WriteTo(reply.ToBytes(), dst); err != nil {
			s.log.Warn("dhcp reply failed", "type", reply.MessageType(), "err", err)
			continue
		}
		s.log.Debug("dhcp reply", "type", reply.MessageType(), "to", dst)
		if ev == eventAcked {
			now := time.Now()
			l := &Lease{
				Interface: s.name, MAC: s.cfg.ClientMAC, Addr: s.cfg.ClientAddr,
				Hostname: req.HostName(), Acked: now, Expires: now.Add(s.cfg.LeaseTime),
			}
			s.setLease(l)
			if s.onLease != nil {
				s.onLease(*l)
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
			return Lease{}, fmt.Errorf("wait for lease on %s: %w", s.cfg.Interface, ErrClosed)
		}
		select {
		case <-ch:
		case <-s.done:
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		case <-ctx.Done():
			return Lease{}, fmt.Errorf("wait for lease on %s: %w", s.cfg.Interface, ctx.Err())
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
