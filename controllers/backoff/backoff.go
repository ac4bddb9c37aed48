package backoff

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Kubelet's image pull back-off (pkg/kubelet: imageBackOffPeriod, MaxImageBackOff).
const (
	DefaultInitial = 10 * time.Second
	DefaultMax     = 5 * time.Minute
)

// Backoff holds one back-off entry per key: the first failure waits Initial, each further one
// twice the previous wait, capped at Max. An entry not updated for 2×Max has expired: it no
// longer delays, the next failure starts again at Initial, and GC removes it (flowcontrol's
// hasExpired). Safe for concurrent use.
type Backoff[K comparable] struct {
	initial, max time.Duration
	clock        clock.PassiveClock

	mu      sync.Mutex
	entries map[K]*entry
}

type entry struct {
	delay time.Duration
	last  time.Time // when the failure was recorded
	cause string
}

// Entry is where a key stands: the failure's cause, the wait it started and when the wait ends.
type Entry struct {
	Cause string
	Delay time.Duration
	Next  time.Time
}

// NextTry says when the wait ends, for messages: "next try in 10s (at 15:04:05Z)".
func (e Entry) NextTry() string {
	return fmt.Sprintf("next try in %s (at %s)", e.Delay, e.Next.UTC().Format("15:04:05Z"))
}

// New makes a Backoff; initial or maxWait ≤ 0 take the kubelet's defaults, and the maximum is
// at least initial. clk nil means the real clock.
func New[K comparable](initial, maxWait time.Duration, clk clock.PassiveClock) *Backoff[K] {
	if initial <= 0 {
		initial = DefaultInitial
	}
	if maxWait <= 0 {
		maxWait = DefaultMax
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Backoff[K]{initial: initial, max: max(maxWait, initial), clock: clk, entries: map[K]*entry{}}
}

// Failed records a failure of key now (flowcontrol's Next) and returns the wait it starts.
// Expired entries of other keys are removed on the way.
func (b *Backoff[K]) Failed(key K, cause string) Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.gcLocked(now)
	e, ok := b.entries[key]
	if !ok || b.expired(now, e) {
		e = &entry{delay: b.initial}
		b.entries[key] = e
	} else {
		e.delay = min(2*e.delay, b.max)
	}
	e.last, e.cause = now, cause
	return Entry{Cause: cause, Delay: e.delay, Next: now.Add(e.delay)}
}

// Waiting reports whether key is still waiting out its back-off now (flowcontrol's
// IsInBackOffSinceUpdate), and its entry if so.
func (b *Backoff[K]) Waiting(key K) (Entry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	e, ok := b.entries[key]
	if !ok || b.expired(now, e) || now.Sub(e.last) >= e.delay {
		return Entry{}, false
	}
	return Entry{Cause: e.cause, Delay: e.delay, Next: e.last.Add(e.delay)}, true
}

// Failing reports whether key has failed and not been forgotten (nor expired): a try now is a
// retry.
func (b *Backoff[K]) Failing(key K) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	return ok && !b.expired(b.clock.Now(), e)
}

// Reset forgets key: its next failure waits Initial again.
func (b *Backoff[K]) Reset(key K) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// DeleteFunc forgets every key for which del is true and returns how many it forgot.
func (b *Backoff[K]) DeleteFunc(del func(K) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k := range b.entries {
		if del(k) {
			delete(b.entries, k)
			n++
		}
	}
	return n
}

// GC removes the expired entries (flowcontrol's GC).
func (b *Backoff[K]) GC() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gcLocked(b.clock.Now())
}

// Len is the number of entries held.
func (b *Backoff[K]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.entries)
}

func (b *Backoff[K]) gcLocked(now time.Time) {
	for k, e := range b.entries {
		if b.expired(now, e) {
			delete(b.entries, k)
		}
	}
}

// expired is flowcontrol's hasExpired: no failure for twice the maximum wait.
func (b *Backoff[K]) expired(now time.Time, e *entry) bool {
	return now.Sub(e.last) > 2*b.max
}
