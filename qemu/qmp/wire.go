package qmp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// message is one decoded line from QEMU.
type message struct {
	kind     string // KindGreeting, KindReply, KindEvent or KindUnknown
	raw      []byte // the line as received (set by the reader)
	id       uint64 // reply id, valid when hasID
	hasID    bool
	ret      json.RawMessage // reply "return" value
	err      *Error          // reply "error" value
	event    Event
	greeting Greeting
}

// wireMessage is the union of everything QEMU sends on a QMP socket.
type wireMessage struct {
	QMP *struct {
		Version struct {
			QEMU struct {
				Major int `json:"major"`
				Minor int `json:"minor"`
				Micro int `json:"micro"`
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
		Capabilities []string `json:"capabilities"`
	} `json:"QMP"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
}

// command is what the client writes: {"execute": NAME, "arguments": {...}, "id": N}.
type command struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        uint64          `json:"id,string"` // a JSON string: go-qemu decodes ids as strings
}

// decodeMessage classifies and decodes one line. It never panics; a line that is not a JSON
// object, or is none of greeting/reply/event, is an error with kind KindUnknown.
func decodeMessage(line []byte) (message, error) {
	var w wireMessage
	if err := json.Unmarshal(line, &w); err != nil {
		return message{kind: KindUnknown}, fmt.Errorf("decode message: %w", err)
	}
	switch {
	case w.QMP != nil:
		v := w.QMP.Version
		return message{kind: KindGreeting, greeting: Greeting{
			Version: Version{
				Major: v.QEMU.Major, Minor: v.QEMU.Minor, Micro: v.QEMU.Micro, Package: v.Package,
			},
			Capabilities: w.QMP.Capabilities,
		}}, nil
	case w.Event != "":
		ev := Event{Name: w.Event}
		if len(w.Data) > 0 && !bytes.Equal(w.Data, []byte("null")) {
			ev.Data = w.Data
		}
		// Microseconds within the second (QEMU writes 0..999999): others overflowed the
		// nanoseconds into a made-up time; such a timestamp is unknown, as a negative one.
		if ts := w.Timestamp; ts != nil && ts.Seconds >= 0 && ts.Microseconds >= 0 && ts.Microseconds < 1e6 {
			ev.Timestamp = time.Unix(ts.Seconds, ts.Microseconds*int64(time.Microsecond/time.Nanosecond))
		}
		return message{kind: KindEvent, event: ev}, nil
	case w.Return != nil || w.Error != nil:
		m := message{kind: KindReply, ret: w.Return, err: w.Error}
		m.id, m.hasID = parseID(w.ID)
		return m, nil
	}
	return message{kind: KindUnknown}, fmt.Errorf("decode message: %w: neither greeting, reply nor event", ErrProtocol)
}

// formatID renders a command id the way the client sends it: a decimal number in a JSON string.
func formatID(id uint64) json.RawMessage {
	return json.RawMessage(`"` + strconv.FormatUint(id, 10) + `"`)
}

// parseID reads back an id written by formatID. Any other id (a number, a foreign string)
// cannot be ours.
func parseID(raw json.RawMessage) (uint64, bool) {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != s {
		return 0, false
	}
	return id, true
}

// trimLine drops the line ending and surrounding blanks QEMU writes ("...}\r\n").
func trimLine(b []byte) []byte { return bytes.TrimSpace(b) }
