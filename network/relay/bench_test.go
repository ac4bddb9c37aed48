package relay

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmlet/vmlet/pki"
)

// BenchmarkRelayPair measures what a migration's relays cost: a unix socket relayed over TCP
// on loopback into another unix socket, as a source and a target agent do, in plaintext and
// with TLS between the two relays (the migration's default), for one stream and for three at
// once (a migration's main stream and its 2 multifd channels). Both relays, the writer and
// the reader share this host's cores, as both nodes do in the tests; MB/s is the payload.
//
//	go test -run '^$' -bench RelayPair -benchtime 2s ./network/relay/
func BenchmarkRelayPair(b *testing.B) {
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv, cli := tlsConfigs(b, ca, ca)
	for _, c := range []struct {
		name    string
		tls     bool
		streams int
	}{{"plain-1", false, 1}, {"tls-1", true, 1}, {"plain-3", false, 3}, {"tls-3", true, 3}} {
		b.Run(c.name, func(b *testing.B) {
			var s, cl *tls.Config
			if c.tls {
				s, cl = srv, cli
			}
			benchRelayPair(b, s, cl, c.streams)
		})
	}
}

func benchRelayPair(b *testing.B, srv, cli *tls.Config, streams int) {
	dir := b.TempDir()
	sink, err := net.Listen("unix", filepath.Join(dir, "sink.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	in := tcp
	if srv != nil {
		in = tls.NewListener(tcp, srv)
	}
	var d net.Dialer
	target := Start(in, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sink.Addr().String()) })
	defer target.Close()
	src, err := net.Listen("unix", filepath.Join(dir, "src.sock"))
	if err != nil {
		b.Fatal(err)
	}
	source := Start(src, func(ctx context.Context) (net.Conn, error) {
		c, err := d.DialContext(ctx, "tcp", tcp.Addr().String())
		if err != nil || cli == nil {
			return c, err
		}
		tc := tls.Client(c, cli)
		return tc, tc.HandshakeContext(ctx)
	})
	defer source.Close()

	const chunk = 1 << 20
	buf := make([]byte, chunk)
	conns := make([]net.Conn, streams)
	for i := range conns {
		if conns[i], err = net.Dial("unix", src.Addr().String()); err != nil {
			b.Fatal(err)
		}
		defer conns[i].Close()
	}
	b.SetBytes(int64(chunk * streams))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
