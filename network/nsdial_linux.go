package network

import (
	"context"
	"fmt"
	"net"
)

// ListenTCP listens on TCP addr ("IP:port") inside the network namespace at netnsPath (empty:
// the process's own). The socket is created on a locked OS thread switched into that
// namespace, which Go then discards (the thread is never switched back); the socket belongs to
// that namespace for its whole life, whichever threads use it later.
//
// Equivalent to: `ip netns exec NS <listen on ADDR>`.
func ListenTCP(netnsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := doInNetns(netnsPath, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in netns %q: %w", addr, netnsPath, err)
	}
	return ln, nil
}

// DialTCP connects to TCP addr ("IP:port": no name lookup, which would run in the caller's
// namespace) from inside the network namespace at netnsPath (empty: the process's own), as
// ListenTCP creates its socket. ctx bounds the connect.
//
// Equivalent to: `ip netns exec NS <connect to ADDR>`.
func DialTCP(ctx context.Context, netnsPath, addr string) (net.Conn, error) {
	var c net.Conn
	err := doInNetns(netnsPath, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from netns %q: %w", addr, netnsPath, err)
	}
	return c, nil
}
