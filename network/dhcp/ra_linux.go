package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// raInterval is the period of unsolicited advertisements; guests mostly get theirs as the
// answer to their router solicitation.
const raInterval = 60 * time.Second

var (
	allNodes   = net.ParseIP("ff02::1")
	allRouters = net.ParseIP("ff02::2")
)

// RAServer sends router advertisements on one bridge: at start, every raInterval, and at
// once in answer to every router solicitation.
type RAServer struct {
	cfg   RAConfig
	conn  net.PacketConn
	pc    *ipv6.PacketConn
	index int
	msg   []byte
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}
}

// ServeRA starts advertising cfg in the network namespace at netnsPath. Its raw ICMPv6 socket
// is created there, bound to the bridge, with hop limit 255 as receivers require.
//
// Equivalent to: radvd with `AdvManagedFlag on; AdvOtherConfigFlag on; prefix P {
// AdvAutonomous off; }` on the bridge.
func ServeRA(netnsPath string, cfg RAConfig, log *slog.Logger) (*RAServer, error) {
	var conn net.PacketConn
	err := doInNetns(netnsPath, func() (err error) {
		conn, err = listenRA(cfg.Interface)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start router advertisements on %s: %w", cfg.Interface, err)
	}
	return serveRAConn(conn, cfg, log)
}

// listenRA opens the raw ICMPv6 socket of the advertisements on iface in the calling
// thread's namespace (needs CAP_NET_RAW; sending on it later does not): bound to iface,
// router solicitations only, hop limit 255, multicast out of iface, member of ff02::2.
func listenRA(iface string) (net.PacketConn, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), iface) })
		return errors.Join(err, serr)
	}}
	conn, err := lc.ListenPacket(context.Background(), "ip6:ipv6-icmp", "::")
	if err != nil {
		return nil, err
	}
	pc := ipv6.NewPacketConn(conn)
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeRouterSolicitation)
	err = errors.Join(
		pc.SetICMPFilter(&f),
		pc.SetMulticastHopLimit(255),
		pc.SetHopLimit(255),
		pc.SetMulticastInterface(ifi),
		pc.JoinGroup(ifi, &net.IPAddr{IP: allRouters}),
	)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// serveRAConn advertises cfg on conn, a socket opened by listenRA; the server owns it. The
// bridge's index is read from the socket's binding (SO_BINDTOIFINDEX), not looked up by
// name: the calling process may be in another namespace.
func serveRAConn(conn net.PacketConn, cfg RAConfig, log *slog.Logger) (*RAServer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	index, err := boundIndex(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start router advertisements on %s: %w", cfg.Interface, err)
	}
	s := &RAServer{cfg: cfg, conn: conn, pc: ipv6.NewPacketConn(conn), index: index, msg: raMessage(&cfg),
		log: log.With("ra", cfg.Interface), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

// boundIndex is the interface index a socket is bound to (getsockopt SO_BINDTOIFINDEX).
func boundIndex(conn net.PacketConn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("bound interface: %T has no file descriptor", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var index int
	var gerr error
	if err := raw.Control(func(fd uintptr) { index, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, fmt.Errorf("get bound interface: %w", gerr)
	}
	if index == 0 {
		return 0, errors.New("get bound interface: the socket is bound to none")
	}
	return index, nil
}

func (s *RAServer) run() {
	defer close(s.done)
	solicited := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, _, err := s.pc.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			if isSolicitation(buf[:n]) {
				select {
				case solicited <- struct{}{}:
				default:
				}
			}
		}
	}()
	tick := time.NewTicker(raInterval)
	defer tick.Stop()
	for {
		s.send()
		select {
		case <-solicited:
		case <-tick.C:
		case <-s.stop:
			return
		}
	}
}

// send multicasts the advertisement to all nodes. Before the guest attached its queue the
// bridge has no carrier and the send fails: the guest's solicitation brings the next one.
func (s *RAServer) send() {
	cm := &ipv6.ControlMessage{Src: net.IP(s.cfg.Source.AsSlice()), IfIndex: s.index, HopLimit: 255}
	if _, err := s.pc.WriteTo(s.msg, cm, &net.IPAddr{IP: allNodes}); err != nil {
		s.log.Debug("router advertisement not sent", "err", err)
	}
}

// Close stops the advertisements.
func (s *RAServer) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	err := s.conn.Close()
	<-s.done
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
