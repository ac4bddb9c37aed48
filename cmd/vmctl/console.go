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
)

// escapeByte ends a console session: Ctrl-] (like telnet and virsh console).
const escapeByte = 0x1d

// console connects the terminal to the guest's serial console: the launcher's
// <run dir>/sockets/console.sock, next to the launcher socket. The terminal is put in raw
// mode when stdin is one; Ctrl-] quits. Only one console client can be attached at a time.
func (c *cli) console(ctx context.Context) error {
	path := filepath.Join(filepath.Dir(c.sock), "sockets", "console.sock")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("connect console: %w", err)
	}
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
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	if errors.Is(err, errEscape) || errors.Is(err, net.ErrClosed) {
		return nil
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
			if _, werr := dst.Write(chunk); werr != nil {
				return werr
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
