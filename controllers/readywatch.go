package controllers

import (
	"context"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/controllers/process"
)

// readyWatch tells the reconciler the moment a starting launcher renames its socket to the
// ready name, instead of it polling the run folder: one inotify instance for the agent, one
// watch per starting launcher. Equivalent to: inotifywait -e moved_to,create <run dir>
type readyWatch struct {
	fd      int
	f       *os.File // fd in Go's poller: Close ends run
	onReady func(id string)

	mu  sync.Mutex
	ids map[int32]string // watch descriptor → launcher id
	wds map[string]int32
}

func newReadyWatch(onReady func(id string)) (*readyWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch launcher sockets: %w", err)
	}
	w := &readyWatch{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), onReady: onReady, ids: map[int32]string{}, wds: map[string]int32{}}
	go w.run()
	return w, nil
}

// Start runs until ctx ends, then closes the watch (a manager Runnable).
func (w *readyWatch) Start(ctx context.Context) error {
	<-ctx.Done()
	return w.f.Close()
}

// add watches dir for id's ready socket (idempotent). The caller checks the socket again after
// add: it may have appeared before the watch existed.
func (w *readyWatch) add(id, dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.wds[id]; ok {
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_ONLYDIR)
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.ids[int32(wd)], w.wds[id] = id, int32(wd)
	return nil
}

// remove stops watching id's run folder.
func (w *readyWatch) remove(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wd, ok := w.wds[id]; ok {
		_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
		delete(w.wds, id)
		delete(w.ids, wd)
	}
}

func (w *readyWatch) run() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.PathMax))
	for {
		n, err := w.f.Read(buf)
		if err != nil || n <= 0 {
			return // closed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := cString(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
			off += unix.SizeofInotifyEvent + int(ev.Len)
			w.mu.Lock()
			id, ok := w.ids[ev.Wd]
			if ev.Mask&unix.IN_IGNORED != 0 { // the folder went
				delete(w.ids, ev.Wd)
				delete(w.wds, id)
			}
			w.mu.Unlock()
			if ok && name == process.ReadySocket {
				w.remove(id)
				w.onReady(id)
			}
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
