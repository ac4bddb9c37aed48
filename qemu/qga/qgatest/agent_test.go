package qgatest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	"github.com/vmlet/vmlet/qemu/qga/qgatest"
)

// TestFakeSpeaksQGA checks the fake against qemu-ga's wire behaviour: 0xFF answered with an
// id-less parse error, guest-sync-delimited answered after a 0xFF, ids echoed, requests held
// while the agent is "down" and answered late on Release.
func TestFakeSpeaksQGA(t *testing.T) {
	ag := qgatest.New(qgatest.Options{})
	t.Cleanup(func() { _ = ag.Close() })
	conn := ag.Pipe()
	defer conn.Close()
	r := bufio.NewReader(conn)
	write := func(b string) {
		t.Helper()
		if _, err := conn.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	readLine := func() []byte {
		t.Helper()
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}

	write("\xff" + `{"execute":"guest-sync-delimited","arguments":{"id":77}}` + "\n")
	if line := readLine(); !bytes.Contains(line, []byte(`"error"`)) || bytes.Contains(line, []byte(`"id"`)) {
		t.Errorf("answer to 0xFF = %s, want an id-less error", line)
	}
	if line := readLine(); line[0] != 0xFF || !bytes.Contains(line, []byte(`"return":77`)) {
		t.Errorf("sync reply = %q, want 0xFF then return 77", line)
	}
	write(`{"execute":"guest-ping","id":"p1"}` + "\n")
	if line := readLine(); !bytes.Equal(bytes.TrimSpace(line), []byte(`{"id":"p1","return":{}}`)) {
		t.Errorf("ping reply = %s", line)
	}

	ag.Hold()
	write(`{"execute":"guest-ping","id":"late"}` + "\n")
	ag.Release()
	if line := readLine(); !bytes.Contains(line, []byte(`"late"`)) {
		t.Errorf("held request answered as %s", line)
	}
	write(`{"execute":"guest-shutdown","id":"s"}` + "\n" + `{"execute":"guest-info","id":"i"}` + "\n")
	var info struct {
		ID     string
		Return struct {
			Version  string
			Commands []struct{ Name string } `json:"supported_commands"`
		}
	}
	if err := json.Unmarshal(readLine(), &info); err != nil || info.ID != "i" || info.Return.Version != "7.2.22" {
		t.Fatalf("guest-info after guest-shutdown = %+v, %v; want no shutdown reply, then guest-info", info, err)
	}
	if got := len(ag.Requests()); got != 5 {
		t.Errorf("recorded %d requests, want 5", got)
	}
}
