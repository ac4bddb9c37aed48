package qmp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzMessageRoundTrip: every line the decoder accepts, written again the way QEMU writes
// its kind (encodeMessage), decodes to the same message; and a command the client writes
// (command, formatID) carries back its id and arguments.
//
//	go test ./qemu/qmp -run '^$' -fuzz FuzzMessageRoundTrip -fuzztime 60s
func FuzzMessageRoundTrip(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), uint64(1), []byte(`{"device":"disk1"}`))
	}
	f.Add([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 0, "major": 0}, "package": "\u0000"}, "capabilities": null}}`), uint64(0), []byte(nil))
	f.Add([]byte(`{"event": "X", "data": {"a": [1, 2.5e3, "\ud800"]}, "timestamp": {"seconds": 0, "microseconds": 999999999999}}`), uint64(18446744073709551615), []byte(`[]`))
	f.Fuzz(func(t *testing.T, line []byte, id uint64, args []byte) {
		msg, err := decodeMessage(line)
		if err == nil {
			enc := encodeMessage(t, msg)
			again, err := decodeMessage(enc)
			if err != nil {
				t.Fatalf("%s re-encoded as %s does not decode: %v", line, enc, err)
			}
			if !sameMessage(msg, again) {
				t.Fatalf("%s decoded to %+v\nre-encoded as %s decodes to %+v", line, msg, enc, again)
			}
		}
		if !json.Valid(args) {
			args = nil
		}
		cmd, err := json.Marshal(command{Execute: "query-status", Arguments: args, ID: id})
		if err != nil {
			t.Fatalf("marshal command: %v", err)
		}
		var back struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
			ID        json.RawMessage `json:"id"`
		}
		if err := json.Unmarshal(cmd, &back); err != nil {
			t.Fatalf("command %s: %v", cmd, err)
		}
		if got, ok := parseID(back.ID); !ok || got != id || !bytes.Equal(back.ID, formatID(id)) {
			t.Fatalf("command %s: id %s read back as %d, %v", cmd, back.ID, got, ok)
		}
		if !jsonEqual(back.Arguments, args) || back.Execute != "query-status" {
			t.Fatalf("command %s lost its arguments %s", cmd, args)
		}
	})
}

// encodeMessage writes msg as QEMU would send it.
func encodeMessage(t *testing.T, m message) []byte {
	var v any
	switch m.kind {
	case KindGreeting:
		g := m.greeting
		v = map[string]any{"QMP": map[string]any{
			"version":      map[string]any{"qemu": map[string]int{"major": g.Version.Major, "minor": g.Version.Minor, "micro": g.Version.Micro}, "package": g.Version.Package},
			"capabilities": g.Capabilities,
		}}
	case KindEvent:
		e := map[string]any{"event": m.event.Name}
		if m.event.Data != nil {
			e["data"] = m.event.Data
		}
		if !m.event.Timestamp.IsZero() {
			ts := m.event.Timestamp
			e["timestamp"] = map[string]int64{"seconds": ts.Unix(), "microseconds": int64(ts.Nanosecond() / 1e3)}
		}
		v = e
	case KindReply:
		r := map[string]any{}
		if m.ret != nil {
			r["return"] = m.ret
		}
		if m.err != nil {
			r["error"] = m.err
		}
		if m.hasID {
			r["id"] = formatID(m.id)
		}
		v = r
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %+v: %v", m, err)
	}
	return b
}

func sameMessage(a, b message) bool {
	return a.kind == b.kind && a.id == b.id && a.hasID == b.hasID && jsonEqual(a.ret, b.ret) &&
		reflect.DeepEqual(a.err, b.err) && a.event.Name == b.event.Name && jsonEqual(a.event.Data, b.event.Data) &&
		a.event.Timestamp.Equal(b.event.Timestamp) && reflect.DeepEqual(a.greeting, b.greeting)
}

// jsonEqual compares two JSON values by meaning (nil only equals nil).
func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}
