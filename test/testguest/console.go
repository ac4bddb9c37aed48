package testguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// ErrConsoleClosed means the console's reader ended (QEMU exited) before the awaited text
// appeared.
var ErrConsoleClosed = errors.New("console closed")

// WaitError is returned by the Console wait methods: what was awaited, from which offset, and
// why the wait ended (ErrConsoleClosed or the context's error).
type WaitError struct {
	Substr string
	From   int
	Err    error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("wait for %q on console from byte %d: %v", e.Substr, e.From, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Console collects a guest's serial output from an io.Reader and lets tests wait for text in
// it without polling: every chunk read wakes the waiters. It keeps the whole log.
//
// Offsets are byte positions in the log. Wait consumes from an internal cursor (for markers
// that follow each other); WaitFrom and WaitLine take an explicit offset, typically Len()
// taken before an action: off := c.Len(); act(); c.WaitFrom(ctx, off, MarkerDiskAdded).
type Console struct {
	mu      sync.Mutex
	buf     []byte
	cursor  int
	ended   bool
	readErr error
	notify  chan struct{} // closed and replaced when buf grows or the reader ends
	done    chan struct{} // closed when the reader ended
}

// NewConsole starts reading r until EOF or an error.
func NewConsole(r io.Reader) *Console {
	c := &Console{notify: make(chan struct{}), done: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *Console) read(r io.Reader) {
	defer close(c.done)
	chunk := make([]byte, 4096)
	for {
		n, err := r.Read(chunk)
		c.mu.Lock()
		c.buf = append(c.buf, chunk[:n]...)
		if err != nil {
			c.ended = true
			if !errors.Is(err, io.EOF) {
				c.readErr = err
			}
		}
		close(c.notify)
		c.notify = make(chan struct{})
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Done is closed once the reader has ended (for QEMU's serial: QEMU exited).
func (c *Console) Done() <-chan struct{} { return c.done }

// Err returns the reader's error once it ended, nil for a clean EOF or while still reading.
func (c *Console) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr
}

// String returns everything read so far.
func (c *Console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.buf)
}

// Len returns the number of bytes read so far: an offset for WaitFrom and WaitLine.
func (c *Console) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// Wait waits until substr appears at or after the cursor, then moves the cursor just past it.
// A marker printed once is found by the first Wait for it; a second Wait for the same marker
// needs a second occurrence.
func (c *Console) Wait(ctx context.Context, substr string) error {
	c.mu.Lock()
	from := c.cursor
	c.mu.Unlock()
	_, end, err := c.wait(ctx, from, substr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if end > c.cursor {
		c.cursor = end
	}
	c.mu.Unlock()
	return nil
}

// WaitFrom waits until substr appears at or after byte offset from and returns the offset just
// past the match. It does not move the cursor.
func (c *Console) WaitFrom(ctx context.Context, from int, substr string) (int, error) {
	_, end, err := c.wait(ctx, from, substr)
	return end, err
}

// WaitLine waits until a complete line (terminated by '\n') containing substr appears at or
// after byte offset from. It returns the line without its line ending and the offset after it.
// Use it to read a marker's arguments: WaitLine(ctx, 0, MarkerIP+" eth0 ").
func (c *Console) WaitLine(ctx context.Context, from int, substr string) (string, int, error) {
	i, _, err := c.wait(ctx, from, substr)
	if err != nil {
		return "", 0, err
	}
	_, end, err := c.wait(ctx, i, "\n")
	if err != nil {
		return "", 0, err
	}
	c.mu.Lock()
	start := bytes.LastIndexByte(c.buf[:i], '\n') + 1
	line := string(c.buf[start : end-1])
	c.mu.Unlock()
	return strings.TrimRight(line, "\r"), end, nil
}

// wait returns the index of the first substr at or after from and the offset past it.
func (c *Console) wait(ctx context.Context, from int, substr string) (int, int, error) {
	from = max(from, 0)
	next := from // bytes before next (minus len(substr)-1) were searched already
	for {
		c.mu.Lock()
		if start := max(from, next-len(substr)+1); start < len(c.buf) {
			if i := bytes.Index(c.buf[start:], []byte(substr)); i >= 0 {
				c.mu.Unlock()
				return start + i, start + i + len(substr), nil
			}
		}
		next = len(c.buf)
		ended, notify := c.ended, c.notify
		c.mu.Unlock()
		if ended {
			return 0, 0, &WaitError{Substr: substr, From: from, Err: ErrConsoleClosed}
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return 0, 0, &WaitError{Substr: substr, From: from, Err: ctx.Err()}
		}
	}
}
