package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
)

// waitMarker connects to a serial console socket (QEMU serves it, one client at a time) and
// reads until the guest prints marker, ctx ends or QEMU closes it. Equivalent to
// `socat -u UNIX-CONNECT:PATH - | grep -m1 MARKER`.
func waitMarker(ctx context.Context, path, marker string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("dial console %s: %w", path, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // wakes the Read below
	defer stop()
	var seen []byte
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		seen = append(seen, buf[:n]...)
		if bytes.Contains(seen, []byte(marker)) {
			return nil
		}
		if len(seen) > 1<<20 {
			seen = seen[len(seen)-len(marker):]
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("wait for %s on %s: %w", marker, path, ctx.Err())
			}
			return fmt.Errorf("wait for %s on %s: %w", marker, path, err)
		}
	}
}
