package qga

import (
	"errors"
	"testing"
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
