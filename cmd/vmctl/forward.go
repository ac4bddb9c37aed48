package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// listenLocal listens on addr (host:port; port 0 picks a free one) until ctx ends.
func listenLocal(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	return l, nil
}

// serveForward accepts connections on l until ctx ends and relays each through its own
// stream from dial. A connection whose stream cannot be opened is closed and the error
// printed; serving goes on.
func (c *cli) serveForward(ctx context.Context, l net.Listener, dial func(context.Context) (*subresclient.Stream, error)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil // ^C
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, c.timeout)
			s, err := dial(dctx)
			cancel()
			if err != nil {
				fmt.Fprintf(c.stderr, "vmctl: %v\n", explain(err))
				_ = conn.Close()
				return
			}
			relay(ctx, conn, s)
		}()
	}
}

// relay copies between a local connection and a stream until both directions are done: the
// local side's EOF is passed on as a websocket close, and the stream's end closes the local
// connection.
func relay(ctx context.Context, conn net.Conn, s *subresclient.Stream) {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close(); _ = s.Close() })
	defer stop()
	go func() {
		if _, err := io.Copy(s, conn); err == nil {
			_ = s.CloseWrite()
		}
	}()
	_, _ = io.Copy(conn, s)
	_ = conn.Close()
	_ = s.Close()
}

// parsePorts reads port-forward's LOCAL:GUEST (or PORT for both).
func parsePorts(spec string) (local, guest int, err error) {
	l, g, ok := strings.Cut(spec, ":")
	if !ok {
		g = l
	}
	if local, err = strconv.Atoi(l); err != nil || local < 0 || local > 65535 {
		return 0, 0, usageError(fmt.Sprintf("port-forward: bad local port in %q (LOCAL:GUEST, LOCAL 0 picks a free one)", spec))
	}
	if guest, err = strconv.Atoi(g); err != nil || guest < 1 || guest > 65535 {
		return 0, 0, usageError(fmt.Sprintf("port-forward: bad guest port in %q (LOCAL:GUEST)", spec))
	}
	return local, guest, nil
}

// portForward listens on address:local and forwards each connection to the guest's port.
func (c *cli) portForward(ctx context.Context, t *vmTarget, address string, local, guest int) error {
	l, err := listenLocal(ctx, net.JoinHostPort(address, strconv.Itoa(local)))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Forwarding from %s -> vmi %s port %d (^C stops)\n", l.Addr(), t.vmi, guest)
	return c.serveForward(ctx, l, func(ctx context.Context) (*subresclient.Stream, error) {
		return t.sub.PortForward(ctx, t.vmi, guest)
	})
}
