package realclustere2e_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"

	"github.com/vmlet/vmlet/test/realcluster"
)

// proxyAPIServer makes the API server reachable at the pod network's gateway when it listens on
// loopback only (test/realcluster asks envtest for the bridge address but gets 127.0.0.1 when it
// gives no port): in-cluster clients reach it through the kubernetes Service, DNATed to
// <gateway>:<port>. A TCP relay in this process, gone with it. Nothing when the API server
// answers there itself.
func proxyAPIServer(host string) error {
	u, err := url.Parse(host)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return nil
	}
	gw := net.JoinHostPort(realcluster.Gateway.String(), u.Port())
	if c, err := net.Dial("tcp", gw); err == nil {
		_ = c.Close()
		return nil
	}
	ln, err := net.Listen("tcp", gw)
	if err != nil {
		return fmt.Errorf("relay the API server at %s: %w", gw, err)
	}
	fmt.Fprintf(os.Stderr, "realclustere2e: the API server listens on %s only: relaying %s to it for pods\n", u.Host, gw)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, u.Host)
		}
	}()
	return nil
}

func relay(c net.Conn, to string) {
	defer c.Close()
	s, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}
