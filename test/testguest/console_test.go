package testguest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// Unit tests of Console against an io.Pipe (no QEMU).

func TestConsoleWaitAdvancesCursor(t *testing.T) {
	r, w := io.Pipe()
	c := NewConsole(r)
	ctx := ctxT(t, 5*time.Second)
	go func() {
		if _, err := w.Write([]byte("boot\nMARK one\n")); err != nil {
			t.Errorf("write: %v", err)
		}
	}()
	if err := c.Wait(ctx, "MARK"); err != nil {
		t.Fatal(err)
	}
	// The first MARK is consumed: a second Wait needs a second occurrence.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.Wait(short, "MARK"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Wait before a second MARK: %v, want deadline exceeded", err)
	}
	go func() { // a marker split across reads is still found
		for _, s := range []string{"MA", "RK two\n"} {
			if _, err := w.Write([]byte(s)); err != nil {
				t.Errorf("write %q: %v", s, err)
				return
			}
		}
	}()
	if err := c.Wait(ctx, "MARK"); err != nil {
		t.Fatal(err)
	}
	if got := c.String(); got != "boot\nMARK one\nMARK two\n" {
		t.Fatalf("String = %q", got)
	}
	w.Close()
}

func TestConsoleWaitFromAndLine(t *testing.T) {
	r, w := io.Pipe()
	c := NewConsole(r)
	ctx := ctxT(t, 5*time.Second)
	if _, err := w.Write([]byte("VMLET-IP eth0 10.0.2.15\r\nx")); err != nil {
		t.Fatal(err)
	}
	line, end, err := c.WaitLine(ctx, 0, "VMLET-IP eth0 ")
	if err != nil {
		t.Fatal(err)
	}
	if line != "VMLET-IP eth0 10.0.2.15" || end != 25 {
		t.Fatalf("WaitLine = %q, %d", line, end)
	}
	off := c.Len()
	if off != 26 {
		t.Fatalf("Len = %d, want 26", off)
	}
	// Text before the offset does not count.
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.WaitFrom(waitCtx, off, "VMLET-IP")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFrom before the offset: %v, want deadline exceeded", err)
	}
	var we *WaitError
	if !errors.As(err, &we) || we.Substr != "VMLET-IP" || we.From != off {
		t.Fatalf("error %v is not a WaitError for the call", err)
	}
	w.Close()
}

func TestConsoleClosedEndsWait(t *testing.T) {
	r, w := io.Pipe()
	c := NewConsole(r)
	go func() {
		if _, err := w.Write([]byte("partial output")); err != nil {
			t.Errorf("write: %v", err)
		}
		w.Close()
	}()
	_, err := c.WaitFrom(ctxT(t, 5*time.Second), 0, "never")
	if !errors.Is(err, ErrConsoleClosed) {
		t.Fatalf("got %v, want ErrConsoleClosed", err)
	}
	<-c.Done()
	if c.String() != "partial output" || c.Err() != nil {
		t.Fatalf("String = %q, Err = %v", c.String(), c.Err())
	}
	// Text already read is still found after the reader ended.
	if _, err := c.WaitFrom(ctxT(t, time.Second), 0, "output"); err != nil {
		t.Fatal(err)
	}
}
