package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
)

// Marker is the console marker printed once the leased address is usable (test/testguest).
const Marker = "VMLET-IP6"

func main() {
	wait := flag.Duration("wait", 15*time.Second, "give up when the interface or a server does not answer within this time")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-wait D] IFACE\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *wait); err != nil {
		fmt.Fprintf(os.Stderr, "vmlet-dhcp6c: %v\n", err)
		os.Exit(1)
	}
}

// run leases an address on iface, configures it and keeps renewing it until SIGTERM.
func run(iface string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("find interface: %w", err)
	}
	if err := waitLinkLocal(ctx, ifi.Index); err != nil {
		return err
	}
	c, err := nclient6.New(iface, nclient6.WithTimeout(time.Second), nclient6.WithRetry(-1))
	if err != nil {
		return fmt.Errorf("open dhcpv6 socket on %s: %w", iface, err)
	}
	defer c.Close()
	adv, err := c.Solicit(ctx)
	if err != nil {
		return fmt.Errorf("solicit on %s: %w", iface, err)
	}
	reply, err := c.Request(ctx, adv)
	if err != nil {
		return fmt.Errorf("request on %s: %w", iface, err)
	}
	l, err := configure(ctx, ifi, reply)
	if err != nil {
		return err
	}

	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	for {
		t := time.NewTimer(l.t1)
		select {
		case <-t.C:
		case <-usr1:
			t.Stop()
		case <-term:
			return nil
		}
		rctx, rcancel := context.WithTimeout(context.Background(), wait)
		reply, err := renew(rctx, c, reply)
		if err == nil {
			l, err = configure(rctx, ifi, reply)
		}
		rcancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vmlet-dhcp6c: renew on %s: %v\n", iface, err)
			l.t1 = min(l.t1, 10*time.Second) // try again soon; the address stays until it expires
		}
	}
}

// lease is the part of a REPLY the client acts on.
type lease struct {
	addr             net.IP
	preferred, valid time.Duration
	t1               time.Duration
}

// leaseOf reads the one address of the REPLY's IA_NA.
func leaseOf(reply *dhcpv6.Message) (lease, error) {
	if reply.Type() != dhcpv6.MessageTypeReply {
		return lease{}, fmt.Errorf("read reply: got %s", reply.Type())
	}
	ia := reply.Options.OneIANA()
	if ia == nil || ia.Options.OneAddress() == nil {
		return lease{}, fmt.Errorf("read reply: no address in %s", reply.Summary())
	}
	a := ia.Options.OneAddress()
	l := lease{addr: a.IPv6Addr, preferred: a.PreferredLifetime, valid: a.ValidLifetime, t1: ia.T1}
	if l.t1 <= 0 {
		l.t1 = l.preferred / 2
	}
	l.t1 = max(l.t1, time.Second)
	return l, nil
}

// configure adds the leased address and prints the marker once it passed DAD.
func configure(ctx context.Context, ifi *net.Interface, reply *dhcpv6.Message) (lease, error) {
	l, err := leaseOf(reply)
	if err != nil {
		return lease{}, err
	}
	if err := addAddr(ctx, ifi.Index, l); err != nil {
		return lease{}, err
	}
	// One write, starting on a line of its own (after boot the console shell's prompt may
	// end without a newline): the marker stays a whole line among other console output.
	fmt.Printf("\n%s %s %s\n", Marker, ifi.Name, l.addr)
	return l, nil
}

// renew sends RENEW for the address of the last REPLY to its server.
func renew(ctx context.Context, c *nclient6.Client, last *dhcpv6.Message) (*dhcpv6.Message, error) {
	m, err := dhcpv6.NewMessage()
	if err != nil {
		return nil, fmt.Errorf("build renew: %w", err)
	}
	m.MessageType = dhcpv6.MessageTypeRenew
	cid, sid, ia := last.Options.ClientID(), last.Options.ServerID(), last.Options.OneIANA()
	if cid == nil || sid == nil || ia == nil {
		return nil, errors.New("build renew: last reply lacks client id, server id or IA_NA")
	}
	m.AddOption(dhcpv6.OptClientID(cid))
	m.AddOption(dhcpv6.OptServerID(sid))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	m.AddOption(ia)
	return c.SendAndRead(ctx, c.RemoteAddr(), m, nclient6.IsMessageType(dhcpv6.MessageTypeReply))
}
