package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	goqmp "github.com/digitalocean/go-qemu/qmp"
)

var _ goqmp.Monitor = (*GoQEMU)(nil)

// GoQEMU implements go-qemu's qmp.Monitor (Connect/Disconnect/Run/Events) on top of Monitor, so
// go-qemu's qemu.NewDomain and raw.NewMonitor run over this client: unbounded replies, command
// ids, QMP error classes kept (Run returns a wrapped *Error), deadlines from Options, and no
// events lost between Connect and the first Events call.
type GoQEMU struct {
	path string
	opts Options

	mu    sync.Mutex
	m     *Monitor
	early <-chan Event // subscribed at Connect, handed to the first Events call
	stop  func()       // cancels early if no one took it
}

// NewGoQEMUMonitor returns an unconnected go-qemu Monitor for the QMP socket at path.
func NewGoQEMUMonitor(path string, opts Options) *GoQEMU {
	return &GoQEMU{path: path, opts: opts}
}

// Connect dials the socket and negotiates capabilities, bounded by Options.DefaultTimeout. It is
// a no-op while connected; after the connection was lost it dials again.
func (g *GoQEMU) Connect() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m != nil && g.m.Err() == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.timeout("qmp_capabilities"))
	defer cancel()
	m, err := Dial(ctx, g.path, g.opts)
	if err != nil {
		return err
	}
	if g.stop != nil {
		g.stop() // the previous connection's unclaimed early events
	}
	g.m = m
	g.early, g.stop = m.Subscribe(nil)
	return nil
}

// Disconnect closes the connection; Events channels close.
func (g *GoQEMU) Disconnect() error {
	m := g.monitor()
	if m == nil {
		return nil
	}
	g.mu.Lock()
	if g.stop != nil {
		g.stop()
		g.stop = nil
	}
	g.mu.Unlock()
	return m.Close()
}

// Monitor returns the underlying client (nil before Connect).
func (g *GoQEMU) Monitor() *Monitor { return g.monitor() }

func (g *GoQEMU) monitor() *Monitor {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m
}

// Run executes a raw JSON command ({"execute": ...}) with the command's default deadline and
// returns the raw reply line. A QMP error reply is returned as a wrapped *Error.
func (g *GoQEMU) Run(command []byte) ([]byte, error) {
	m := g.monitor()
	if m == nil {
		return nil, fmt.Errorf("run command: %w: not connected", ErrDisconnected)
	}
	out, err := m.ExecuteRaw(context.Background(), command)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Events streams events until ctx is done or the connection is gone, then closes the channel.
// The first call also gets the events that arrived since Connect.
func (g *GoQEMU) Events(ctx context.Context) (<-chan goqmp.Event, error) {
	g.mu.Lock()
	m := g.m
	in, cancel := g.early, g.stop
	g.early, g.stop = nil, nil
	g.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("subscribe events: %w: not connected", ErrDisconnected)
	}
	if in == nil {
		in, cancel = m.Subscribe(nil)
	}
	out := make(chan goqmp.Event)
	go func() {
		defer close(out)
		defer cancel()
		for {
			select {
			case e, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- toGoQEMU(e):
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func toGoQEMU(e Event) goqmp.Event {
	ge := goqmp.Event{Event: e.Name}
	if len(e.Data) > 0 {
		_ = json.Unmarshal(e.Data, &ge.Data) // QEMU event data is always an object
	}
	if !e.Timestamp.IsZero() {
		ge.Timestamp.Seconds = e.Timestamp.Unix()
		ge.Timestamp.Microseconds = int64(e.Timestamp.Nanosecond() / 1000)
	}
	return ge
}
