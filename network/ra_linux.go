package network

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
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &RAServer{cfg: cfg, msg: raMessage(&cfg), log: log.With("ra", cfg.Interface), stop: make(chan struct{}), done: make(chan struct{})}
	err := doInNetns(netnsPath, func() error {
		ifi, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return err
		}
		s.index = ifi.Index
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), cfg.Interface) })
			return errors.Join(err, serr)
		}}
		if s.conn, err = lc.ListenPacket(context.Background(), "ip6:ipv6-icmp", "::"); err != nil {
			return err
		}
		s.pc = ipv6.NewPacketConn(s.conn)
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeRouterSolicitation)
		err = errors.Join(
			s.pc.SetICMPFilter(&f),
			s.pc.SetMulticastHopLimit(255),
			s.pc.SetHopLimit(255),
			s.pc.SetMulticastInterface(ifi),
			s.pc.JoinGroup(ifi, &net.IPAddr{IP: allRouters}),
		)
		if err != nil {
			s.conn.Close()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start router advertisements on %s: %w", cfg.Interface, err)
	}
	go s.run()
	return s, nil
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
			if n > 0 && buf[0] == icmpRouterSolicitation {
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
