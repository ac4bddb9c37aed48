package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"net"
	"os"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// vnc serves the VMI's display on a local TCP port: each viewer that connects gets its own
// websocket to the vnc subresource (the server keeps one VNC client per VMI: a new one takes
// over). It runs until ctx ends (^C).
func (c *cli) vnc(ctx context.Context, t *vmTarget, addr string) error {
	l, err := listenLocal(ctx, addr)
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	host := l.Addr().(*net.TCPAddr).IP.String()
	fmt.Fprintf(c.stdout, "VNC of vmi %s on %s:%d (^C stops)\n", t.vmi, host, port)
	fmt.Fprintf(c.stdout, "attach a viewer: vncviewer %s::%d   or: remote-viewer vnc://%s:%d\n", host, port, host, port)
	return c.serveForward(ctx, l, func(ctx context.Context) (*subresclient.Stream, error) {
		return t.sub.Dial(ctx, t.vmi, "vnc")
	})
}

// screenshot writes the vnc/screenshot PNG to out ("-": stdout).
func (c *cli) screenshot(ctx context.Context, t *vmTarget, out string) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	b, err := t.sub.Screenshot(ctx, t.vmi)
	if err != nil {
		return explain(err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("screenshot of vmi %s is not a PNG: %w", t.vmi, err)
	}
	if out == "-" {
		_, err := io.Copy(c.stdout, bytes.NewReader(b))
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("write screenshot: %w", err)
	}
	fmt.Fprintf(c.stdout, "%s: %dx%d PNG, %d bytes\n", out, img.Width, img.Height, len(b))
	return nil
}
