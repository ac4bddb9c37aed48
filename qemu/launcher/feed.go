package launcher

import "sync"

// feed is an append-only sequence of items numbered 1, 2, 3, ... of which the newest
// `retain` are kept, with wake-ups for readers that follow it (WatchEvents, QMPLog). Closing
// it ends every follower once it has read what is retained.
type feed[T any] struct {
	mu     sync.Mutex
	retain int
	seq    uint64 // number of the newest item
	items  []T    // oldest first; items[i] has number seq-len(items)+1+i
	notify chan struct{}
	closed bool
}

func newFeed[T any](retain int) *feed[T] {
	return &feed[T]{retain: retain, notify: make(chan struct{})}
}

// add appends the item build makes for the next sequence number; it returns false (and does
// not call build) once the feed is closed.
func (f *feed[T]) add(build func(seq uint64) T) (T, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var zero T
	if f.closed {
		return zero, false
	}
	f.seq++
	it := build(f.seq)
	if len(f.items) == f.retain {
		copy(f.items, f.items[1:])
		f.items = f.items[:f.retain-1]
	}
	f.items = append(f.items, it)
	close(f.notify)
	f.notify = make(chan struct{})
	return it, true
}

// window is what a reader gets from since.
type window[T any] struct {
	items  []T             // retained items after the requested number, oldest first
	next   uint64          // number to ask for next time (the newest number returned)
	lost   uint64          // items after the requested number that were no longer retained
	notify <-chan struct{} // closed when an item arrives or the feed closes
	closed bool
}

// since returns the retained items numbered above after (at most the newest `limit`
// when limit > 0).
func (f *feed[T]) since(after uint64, limit int) window[T] {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := window[T]{next: f.seq, notify: f.notify, closed: f.closed}
	first := f.seq - uint64(len(f.items)) + 1 // number of items[0]
	if after >= f.seq {
		return w
	}
	from := after + 1
	if from < first {
		w.lost = first - from
		from = first
	}
	w.items = append(w.items, f.items[from-first:]...)
	if limit > 0 && len(w.items) > limit {
		w.items = w.items[len(w.items)-limit:]
	}
	return w
}

// last is the number of the newest item (0 if none).
func (f *feed[T]) last() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

func (f *feed[T]) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.notify)
	}
}
