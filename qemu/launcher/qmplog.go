package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// QMP log entry origins.
const (
	originWire  = "wire"  // a line on the launcher's own QMP connection (every command, reply, event)
	originDebug = "debug" // a command a qmp-debug.sock client typed (its wire line follows)
	originAPI   = "api"   // a QMP RPC with a caller (the qmp subresource): command and reply, with the caller's name
)

// qmpLogRetention is how many entries QMPLog can replay from memory.
const qmpLogRetention = 1000

// qmpLog records QMP traffic: to a size-capped file rotated to path.1 … path.N, and to an
// in-memory feed for the QMPLog RPC. Writes never fail the caller: the log serves humans and
// must never block QMP (a write error is remembered and reported once by Err).
type qmpLog struct {
	path    string
	maxSize int64 // rotate when the file would grow beyond this
	keep    int   // rotated files kept

	mu   sync.Mutex
	f    *os.File
	size int64
	err  error
	feed *feed[*pb.QMPLogEntry]
}

// openQMPLog opens (appends to) path. maxSize ≤ 0 means 4 MiB, keep ≤ 0 means 3.
func openQMPLog(path string, maxSize int64, keep int) (*qmpLog, error) {
	if maxSize <= 0 {
		maxSize = 4 << 20
	}
	if keep <= 0 {
		keep = 3
	}
	l := &qmpLog{path: path, maxSize: maxSize, keep: keep, feed: newFeed[*pb.QMPLogEntry](qmpLogRetention)}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *qmpLog) open() error {
	// Never through a symlink (every launcher's user may plant one here) nor into a FIFO.
	f, err := qemu.OpenLog(l.path, 0o600)
	if err != nil {
		return fmt.Errorf("open qmp log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat qmp log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// tap is the qmp.Options.Tap: it runs on the monitor's goroutines, serialized.
func (l *qmpLog) tap(r qmp.Record) {
	dir := r.Kind
	switch r.Kind {
	case qmp.KindCommand:
		dir = "cmd"
	case qmp.KindUnknown:
		dir = r.Dir.String() + "-unknown"
	}
	l.add(r.Time, dir, originWire, string(r.Raw), "")
}

// add records one entry; caller is who asked ("" for the launcher's own traffic).
func (l *qmpLog) add(t time.Time, direction, origin, text, caller string) {
	l.feed.add(func(uint64) *pb.QMPLogEntry {
		return &pb.QMPLogEntry{TimeUnixNano: t.UnixNano(), Direction: direction, Text: text, Origin: origin, Caller: caller}
	})
	line := make([]byte, 0, len(text)+64)
	line = t.UTC().AppendFormat(line, "2006-01-02T15:04:05.000000Z07:00")
	line = append(line, ' ')
	line = append(line, origin...)
	if caller != "" {
		line = strconv.AppendQuote(append(line, " caller="...), caller)
	}
	line = append(line, ' ')
	line = append(line, direction...)
	line = append(line, ' ')
	line = append(line, text...)
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	if l.size > 0 && l.size+int64(len(line)) > l.maxSize {
		if err := l.rotate(); err != nil {
			l.remember(err)
			return
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.remember(fmt.Errorf("write qmp log: %w", err))
	}
}

// rotate shifts path.N-1 → path.N, …, path → path.1 and opens a fresh path. Called with mu.
func (l *qmpLog) rotate() error {
	l.f.Close()
	l.f = nil
	for i := l.keep - 1; i >= 1; i-- {
		err := os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate qmp log: %w", err)
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("rotate qmp log: %w", err)
	}
	return l.open()
}

func (l *qmpLog) remember(err error) {
	if l.err == nil {
		l.err = err
	}
}

// Err reports the first write or rotation error.
func (l *qmpLog) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// close ends followers and closes the file.
func (l *qmpLog) close() error {
	l.feed.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("close qmp log: %w", err)
	}
	return nil
}
