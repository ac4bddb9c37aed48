package qga

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeReply: no agent output may panic the reply parser, and a reply carrying an id other
// than ours is never accepted.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{
		`{"return": {}, "id": "vmlet-1"}`, `{"return": {}, "id": "other"}`, `{"return": {}}`,
		`{"error": {"class": "GenericError", "desc": "x"}, "id": "vmlet-1"}`, `{"id": 5, "return": 1}`,
		`{"error": null}`, `{"return": null, "id": "vmlet-1"}`, `[]`, `{`, "\xff{\"return\": 3}", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rep, ok := parseReply(line)
		_, err := decodeReply(line, "vmlet-1")
		if !ok && !errors.Is(err, errStale) {
			t.Fatalf("unparsable line accepted: %v", err)
		}
		if ok && rep.hasID && rep.id != "vmlet-1" && !errors.Is(err, errStale) {
			t.Fatalf("reply with id %q accepted as vmlet-1's", rep.id)
		}
	})
}

// FuzzSyncDelimited: whatever the agent sent before it (replies to abandoned requests, the
// parse error our 0xFF causes, partial lines, stray 0xFF bytes, binary garbage), a 0xFF followed
// by the matching guest-sync-delimited reply completes the sync, and nothing before it does.
//
//	go test ./qemu/qga -run '^$' -fuzz FuzzSyncDelimited -fuzztime 60s
func FuzzSyncDelimited(f *testing.F) {
	for _, s := range []string{
		``, "\n", `{"return": {}}` + "\n", "\xff", "\xff\xff", "\xffabc", "abc\xff",
		`{"error": {"class": "GenericError", "desc": "Invalid JSON syntax"}}` + "\n",
		"\xff{\"return\": 12}\n", "\xff{\"return\": 12}", `{"return": `, "\xff{\"ret",
		"\n\xff\n\xff", strings.Repeat("x", 70<<10), "\xff" + strings.Repeat("y", 70<<10),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, garbage []byte) {
		client, peer := net.Pipe()
		defer peer.Close()
		ag := New(client, Options{DefaultTimeout: 5 * time.Second})
		defer ag.Close()
		go func() {
			line, err := bufio.NewReader(peer).ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				Arguments struct{ ID int64 } `json:"arguments"`
			}
			if len(line) < 2 || line[0] != delimiter || json.Unmarshal(line[1:], &req) != nil {
				return
			}
			reply := fmt.Appendf(nil, "\xff{\"return\": %d}\n", req.Arguments.ID)
			_, _ = peer.Write(append(append([]byte(nil), garbage...), reply...))
		}()
		if err := ag.Sync(context.Background()); err != nil {
			t.Fatalf("sync after %d bytes of stale input %q: %v", len(garbage), shortQ(garbage), err)
		}
	})
}

func shortQ(b []byte) []byte {
	if len(b) > 80 {
		return append(b[:80:80], "..."...)
	}
	return b
}
