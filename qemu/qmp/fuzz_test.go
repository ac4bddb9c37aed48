package qmp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

var fuzzSeeds = []string{
	`{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}`,
	`{"return": {}, "id": "1"}`,
	`{"return": {}, "id": 1}`,
	`{"return": {}, "id": "01"}`,
	`{"id": 2, "error": {"class": "DeviceNotFound", "desc": "Device 'nope' not found"}}`,
	`{"timestamp": {"seconds": 1795937507, "microseconds": 495663}, "event": "RESUME"}`,
	`{"timestamp": {"seconds": -1, "microseconds": -1}, "event": "X", "data": null}`,
	`{"event": "DEVICE_DELETED", "data": {"device": "disk1", "path": "/machine/peripheral/disk1"}}`,
	`{"return": [1, 2, 3], "id": "string-id"}`,
	`{"return": {}, "id": 1.5}`,
	`{"return": {}, "id": -3}`,
	`{"error": {"class": "GenericError", "desc": "JSON parse error"}}`,
	`{"return": null}`,
	`{}`, `[]`, `null`, `"x"`, `{`, "\xff\xfe", `{"QMP": null}`, `{"event": 5}`,
	`{"timestamp": {"seconds": 9223372036854775807, "microseconds": 9223372036854775807}, "event": "BIG"}`,
}

// FuzzDecodeMessage: no input may panic the decoder, and a reply's id is only trusted when it is
// a decimal string in canonical form.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		msg, err := decodeMessage(line)
		if err != nil && msg.kind != KindUnknown {
			t.Fatalf("error %v with kind %s", err, msg.kind)
		}
		if msg.kind == KindEvent && msg.event.Name == "" {
			t.Fatal("event without a name")
		}
		if msg.hasID && msg.kind != KindReply {
			t.Fatalf("id on a %s", msg.kind)
		}
		if msg.hasID && !bytes.Contains(line, formatID(msg.id)) && !bytes.Contains(line, []byte(`\u`)) {
			t.Fatalf("id %d accepted but %s is not in the line", msg.id, formatID(msg.id))
		}
	})
}

// FuzzReader feeds arbitrary bytes after a valid handshake through the real reader loop: it must
// not panic, must not hang, and must report the disconnect when the peer closes.
func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s + "\n" + s + "\r\n"))
	}
	f.Add([]byte("\n\n\r\n  \n"))
	f.Add(bytes.Repeat([]byte("a"), 200<<10)) // one long line without a newline
	f.Fuzz(func(t *testing.T, stream []byte) {
		client, server := net.Pipe()
		defer server.Close()
		go func() {
			_, _ = server.Write([]byte(fuzzSeeds[0] + "\n"))
			buf := make([]byte, 4096)
			_, _ = server.Read(buf) // qmp_capabilities with id 1
			_, _ = server.Write([]byte(`{"return": {}, "id": "1"}` + "\n"))
			_, _ = server.Write(stream)
			_ = server.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := New(ctx, client, Options{})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		events, stop := m.Subscribe(nil)
		defer stop()
		go func() {
			for range events {
			}
		}()
		select {
		case <-m.Done():
		case <-ctx.Done():
			t.Fatal("reader did not finish after the peer closed")
		}
		if m.Err() == nil {
			t.Fatal("Done closed but Err is nil")
		}
	})
}
