package qemu

import (
	"io"
	"sync"
)

// tailBuffer is an io.Writer that keeps only the last max bytes written and copies everything
// to an optional sink (a log). Writes never fail: QEMU's stderr must never block on us.
type tailBuffer struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	sink io.Writer
}

func newTailBuffer(max int, sink io.Writer) *tailBuffer {
	return &tailBuffer{max: max, sink: sink}
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sink != nil {
		_, _ = t.sink.Write(p) // a failing log must not fail QEMU's stderr
	}
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String returns the retained tail.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
