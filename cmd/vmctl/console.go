package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/term"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// escapeByte ends a console session: Ctrl-] (like telnet, virsh console and virtctl console).
const escapeByte = 0x1d

// launcherConsole connects the terminal to the guest's serial console: the launcher's
// <run dir>/sockets/console.sock, next to the launcher socket. Only one console client can be
// attached at a time.
func (c *cli) launcherConsole(ctx context.Context) error {
	path := filepath.Join(filepath.Dir(c.sock), "sockets", "console.sock")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("connect console: %w", err)
	}
	return c.attach(ctx, conn)
}

// vmiConsole connects the terminal to the console subresource of t's VMI.
func (c *cli) vmiConsole(ctx context.Context, t *vmTarget) error {
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	s, err := t.sub.Dial(dctx, t.vmi, "console")
	if err != nil {
		return explain(err)
	}
	return c.attach(ctx, s)
}

// attach copies conn to stdout and stdin to conn until the peer ends the session, Ctrl-] is
// typed, or ctx ends. When stdin is a terminal it is put in raw mode (keys go to the guest as
// typed, ^C included) and restored on the way out, whatever ends the session.
func (c *cli) attach(ctx context.Context, conn io.ReadWriteCloser) error {
	defer conn.Close()
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("set raw terminal: %w", err)
		}
		defer func() { _ = term.Restore(int(f.Fd()), old) }() // best effort on the way out
		fmt.Fprint(c.stderr, "vmctl: connected to the serial console; Ctrl-] quits\r\n")
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(c.stdout, conn)
		done <- err
	}()
	go func() { // stdin's EOF does not end the session (`vmctl console </dev/null` watches)
		if err := copyUntilEscape(conn, c.stdin); err != nil {
			done <- err
		}
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	var closed *subresclient.ClosedError
	switch {
	case errors.Is(err, errEscape), errors.Is(err, net.ErrClosed):
		return nil
	case errors.As(err, &closed):
		return fmt.Errorf("console %w", closed)
	}
	return err
}

var errEscape = errors.New("escape")

// copyUntilEscape copies src to dst until EOF (nil) or the escape byte (errEscape).
func copyUntilEscape(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			i := bytes.IndexByte(chunk, escapeByte)
			if i >= 0 {
				chunk = chunk[:i]
			}
			if len(chunk) > 0 {
				if _, werr := dst.Write(chunk); werr != nil {
					return werr
				}
			}
			if i >= 0 {
				return errEscape
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
