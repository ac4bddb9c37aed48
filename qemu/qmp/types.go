package qmp

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrDisconnected: the connection to QEMU is gone (EOF, read/write error, Close). Pending and
	// later calls return an error wrapping it.
	ErrDisconnected = errors.New("qmp: disconnected")
	// ErrTimeout: a command or wait hit its deadline. Errors read
	// `qmp: timeout: "cmd" after 30s`.
	ErrTimeout = errors.New("qmp: timeout")
	// ErrClosed: Close was called; wrapped together with ErrDisconnected.
	ErrClosed = errors.New("qmp: monitor closed")
	// ErrProtocol: the peer broke the protocol (no greeting, unparsable handshake reply).
	ErrProtocol = errors.New("qmp: protocol error")
	// ErrNotUnixSocket: files can only be passed over a unix socket connection.
	ErrNotUnixSocket = errors.New("qmp: file passing needs a unix socket")
)

// DefaultCommandTimeout is the per-command deadline used when Options.DefaultTimeout is zero.
const DefaultCommandTimeout = 30 * time.Second

// Error is a QMP error reply: {"error": {"class": "DeviceNotFound", "desc": "..."}}.
// Match on Class with errors.As, never on the text.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("qmp: %s: %s", e.Class, e.Desc) }

// Event is an asynchronous QMP event: {"event": NAME, "data": {...}, "timestamp": {...}}.
type Event struct {
	Name      string
	Data      json.RawMessage // nil when the event has no data
	Timestamp time.Time       // QEMU's timestamp (host clock when QEMU emitted it)
	// Seq is the event's place among the events of its connection (1 for the first), as the
	// reader received them: it names one event, e.g. for a Subscribe filter that notes events
	// and the subscriber that later handles them.
	Seq uint64
}

// Version is QEMU's version from the greeting.
type Version struct {
	Major, Minor, Micro int
	Package             string // e.g. "Debian 1:7.2+dfsg-7+deb12u18"
}

// String returns "major.minor.micro".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro) }

// Greeting is what QEMU announces on connect: {"QMP": {"version": ..., "capabilities": [...]}}.
type Greeting struct {
	Version      Version
	Capabilities []string // capabilities QEMU offers, e.g. ["oob"]
}

// Direction of a Record on the wire.
type Direction int

// Directions.
const (
	Sent Direction = iota + 1
	Received
)

// String returns "sent" or "received".
func (d Direction) String() string {
	switch d {
	case Sent:
		return "sent"
	case Received:
		return "received"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Record kinds.
const (
	KindCommand  = "command"
	KindReply    = "reply"
	KindEvent    = "event"
	KindGreeting = "greeting"
	KindUnknown  = "unknown" // a received line that is none of the above (logged, then ignored)
)

// Record is one line on the wire, for Options.Tap (QMP logs, debugging).
type Record struct {
	Time time.Time
	Dir  Direction
	Kind string // KindCommand, KindReply, KindEvent, KindGreeting or KindUnknown
	Raw  []byte // the JSON line without its line ending; owned by the receiver
}

// Options configure a Monitor. The zero value is usable.
type Options struct {
	// DefaultTimeout bounds every command that has no entry in CommandTimeouts; a sooner context
	// deadline wins. Zero means DefaultCommandTimeout.
	DefaultTimeout time.Duration
	// CommandTimeouts overrides DefaultTimeout per command name (e.g. "migrate-incoming").
	CommandTimeouts map[string]time.Duration
	// Tap, if set, sees every line sent and received, in order per direction. It is called
	// synchronously (serialized, never concurrently) from the reader and from Execute: keep it
	// fast and never call the Monitor from it.
	Tap func(Record)
	// Observe, if set, is called once per command that got a reply (Execute, ExecuteWithFiles,
	// ExecuteRaw) with the command's name, the time from just before it was written until its
	// reply arrived (a wait behind other commands' writes included, not behind their replies),
	// and the reply's *Error when QEMU answered with one (nil otherwise).
	// Commands without a reply (timeout, lost connection) are not observed. It runs on the
	// caller's goroutine, possibly concurrently: keep it fast and lock-cheap.
	Observe func(cmd string, took time.Duration, qmpErr *Error)
	// Capabilities is the qmp_capabilities "enable" list (e.g. ["oob"]).
	Capabilities []string
}

func (o Options) timeout(cmd string) time.Duration {
	if d, ok := o.CommandTimeouts[cmd]; ok && d > 0 {
		return d
	}
	if o.DefaultTimeout > 0 {
		return o.DefaultTimeout
	}
	return DefaultCommandTimeout
}
