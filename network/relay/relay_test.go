package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// echo serves ln: every connection gets back what it sent.
func echo(t *testing.T, ln net.Listener) {
	t.Helper()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// echoTCP is an echo server on a loopback TCP port, closed when the test ends.
func echoTCP(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	echo(t, ln)
	return ln
}

// TestUnixToTCPToUnix relays a unix socket over TCP into another unix socket, as the source
// and target agents do, and checks that bytes arrive intact both ways with half-close.
func TestUnixToTCPToUnix(t *testing.T) {
	dir := t.TempDir()
	dst, err := net.Listen("unix", filepath.Join(dir, "target.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	echo(t, dst)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	target := Start(tcp, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "unix", dst.Addr().String())
	})
	defer target.Close()
	src, err := net.Listen("unix", filepath.Join(dir, "source.sock"))
	if err != nil {
		t.Fatal(err)
	}
	source := Start(src, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", target.Addr().String())
	})
	defer source.Close()

	payload := make([]byte, 4<<20)
	_, _ = rand.Read(payload)
	c, err := net.Dial("unix", source.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("got %d bytes back, want the %d sent", len(got), len(payload))
	}
	if source.Accepted() != 1 || target.Accepted() != 1 {
		t.Fatalf("accepted %d/%d connections, want 1/1", source.Accepted(), target.Accepted())
	}
	if source.Bytes() < int64(2*len(payload)) {
		t.Fatalf("source relayed %d bytes, want ≥ %d", source.Bytes(), 2*len(payload))
	}
}

// TestDialFailureClosesAndIsReported: a peer that cannot be reached ends the accepted
// connection (EOF) and is reported by Err.
func TestDialFailureClosesAndIsReported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("no route")
	r := Start(ln, func(context.Context) (net.Conn, error) { return nil, refused })
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read: %v, want EOF", err)
	}
	if !errors.Is(r.Err(), refused) {
		t.Fatalf("Err() = %v, want %v", r.Err(), refused)
	}
}

// TestCloseCutsStreams: Close ends relayed connections that are still open and returns.
func TestCloseCutsStreams(t *testing.T) {
	dst := echoTCP(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	r := Start(ln, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", dst.Addr().String()) })
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after Close succeeded, want the stream cut")
	}
	if _, err := net.Dial("tcp", r.Addr().String()); err == nil {
		t.Fatal("dial after Close succeeded, want refused")
	}
}
