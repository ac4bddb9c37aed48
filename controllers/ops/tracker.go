package ops

import (
	"context"
	"sync"
	"time"
)

// State is where an operation stands.
type State int

const (
	// Running means started and not ended yet (the wake function is called when it ends).
	Running State = iota
	// Done means ended; Outcome holds its value or error.
	Done
)

// Outcome is what Ensure found for a key.
type Outcome[V any] struct {
	State State
	// Value and Err are the operation's result once Done.
	Value V
	Err   error
	// Started and Ended time it (Ended is zero while Running).
	Started, Ended time.Time
}

// Func is an operation. It must return soon after ctx is cancelled.
type Func[V any] func(ctx context.Context) (V, error)

// Tracker runs at most one operation per key at a time.
type Tracker[K comparable, V any] struct {
	wake    func(K)
	timeout time.Duration

	mu     sync.Mutex
	ops    map[K]*op[V]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type op[V any] struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{} // closed when fn has returned
	out    Outcome[V]
}

// New returns a tracker whose operations each run for at most timeout (0: no bound) and
// which calls wake(key) from the operation's goroutine when the operation of key ends (and was
// not cancelled by Forget or another identity).
func New[K comparable, V any](timeout time.Duration, wake func(K)) *Tracker[K, V] {
	ctx, cancel := context.WithCancel(context.Background())
	return &Tracker[K, V]{wake: wake, timeout: timeout, ops: map[K]*op[V]{}, ctx: ctx, cancel: cancel}
}

// Ensure returns the outcome of key's operation with identity id, starting fn for it if
// there is none: nothing known for key, or an operation of another identity (cancelled and
// forgotten). A Done outcome stays until Forget or another identity, so asking again does not
// run fn again; a caller that wants a failed operation retried calls Forget first.
func (t *Tracker[K, V]) Ensure(key K, id string, fn Func[V]) Outcome[V] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o, ok := t.ops[key]; ok {
		if o.id == id {
			return o.out
		}
		o.cancel()
		delete(t.ops, key)
	}
	if t.ctx.Err() != nil { // stopped: nothing new starts
		return Outcome[V]{State: Running}
	}
	ctx, cancel := context.WithCancel(t.ctx)
	if t.timeout > 0 {
		ctx, cancel = context.WithTimeout(t.ctx, t.timeout)
	}
	o := &op[V]{id: id, cancel: cancel, done: make(chan struct{}), out: Outcome[V]{State: Running, Started: time.Now()}}
	t.ops[key] = o
	t.wg.Add(1)
	go t.run(ctx, key, o, fn)
	return o.out
}

func (t *Tracker[K, V]) run(ctx context.Context, key K, o *op[V], fn Func[V]) {
	defer t.wg.Done()
	v, err := fn(ctx)
	o.cancel()
	close(o.done)
	t.mu.Lock()
	current := t.ops[key] == o
	if current {
		o.out = Outcome[V]{State: Done, Value: v, Err: err, Started: o.out.Started, Ended: time.Now()}
	}
	stopped := t.ctx.Err() != nil
	t.mu.Unlock()
	if current && !stopped && t.wake != nil {
		t.wake(key)
	}
}

// Forget cancels key's operation if it runs, waits for it to return (so that what it touches
// can be removed next) and drops what is known about key.
func (t *Tracker[K, V]) Forget(key K) {
	t.mu.Lock()
	o, ok := t.ops[key]
	if ok {
		o.cancel()
		delete(t.ops, key)
	}
	t.mu.Unlock()
	if ok {
		<-o.done
	}
}

// Take returns key's outcome if its operation has ended, and forgets it; an operation still
// running is left alone (false), as is a key with none.
func (t *Tracker[K, V]) Take(key K) (Outcome[V], bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.ops[key]
	if !ok || o.out.State != Done {
		return Outcome[V]{}, false
	}
	delete(t.ops, key)
	return o.out, true
}

// ForgetFunc is Forget for every key pred accepts.
func (t *Tracker[K, V]) ForgetFunc(pred func(K) bool) {
	t.mu.Lock()
	var keys []K
	for k := range t.ops {
		if pred(k) {
			keys = append(keys, k)
		}
	}
	t.mu.Unlock()
	for _, k := range keys {
		t.Forget(k)
	}
}

// Running counts the operations that have not ended.
func (t *Tracker[K, V]) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, o := range t.ops {
		if o.out.State == Running {
			n++
		}
	}
	return n
}

// Stop cancels every operation, waits for them to return and starts no new one; nothing is
// woken after Stop.
func (t *Tracker[K, V]) Stop() {
	t.cancel()
	t.wg.Wait()
}
