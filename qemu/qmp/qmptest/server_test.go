package qmptest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// rawClient speaks QMP by hand, to check the fake against the wire format QEMU uses.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func (c *rawClient) send(line string) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) recv() map[string]any {
	c.t.Helper()
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatal(err)
	}
	if !strings.HasSuffix(line, "\r\n") {
		c.t.Errorf("line %q does not end with CRLF like QEMU's", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		c.t.Fatalf("fake sent invalid JSON %q: %v", line, err)
	}
	return m
}

func TestFakeSpeaksQMP(t *testing.T) {
	srv := qmptest.NewServer(qmptest.Options{Major: 8, Package: "pkg"})
	t.Cleanup(func() { _ = srv.Close() })
	srv.On("query-status").WithArgs(nil).Return(map[string]string{"status": "running"})
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}

	g := c.recv()["QMP"].(map[string]any)
	if v := g["version"].(map[string]any)["qemu"].(map[string]any); v["major"] != float64(8) {
		t.Errorf("greeting version = %v", v)
	}
	c.send(`{"execute": "query-status", "id": "a"}`)
	if e := c.recv()["error"].(map[string]any); e["class"] != "CommandNotFound" {
		t.Errorf("command before negotiation: %v, want CommandNotFound", e)
	}
	c.send(`{"execute": "qmp_capabilities", "id": 1}`)
	if m := c.recv(); m["id"] != float64(1) || m["return"] == nil {
		t.Errorf("qmp_capabilities reply = %v", m)
	}
	c.send(`{"execute": "query-status", "id": {"any": "json"}}`)
	m := c.recv()
	if m["return"].(map[string]any)["status"] != "running" || m["id"].(map[string]any)["any"] != "json" {
		t.Errorf("query-status reply = %v, want status running and the id echoed", m)
	}
	c.send(`{"execute": "query-status", "arguments": {"x": 1}}`)
	if m := c.recv(); m["id"] != nil || m["error"] == nil {
		t.Errorf("non-matching args reply = %v, want CommandNotFound without id", m)
	}
	c.send(`{not json`)
	if m := c.recv(); m["error"].(map[string]any)["class"] != "GenericError" {
		t.Errorf("bad JSON reply = %v", m)
	}
	if err := srv.Emit("STOP", nil); err != nil {
		t.Fatal(err)
	}
	if m := c.recv(); m["event"] != "STOP" || m["timestamp"] == nil {
		t.Errorf("event = %v", m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cmds, err := srv.WaitCommands(ctx, "query-status", 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(cmds[1].ID) != `{"any": "json"}` && string(cmds[1].ID) != `{"any":"json"}` {
		t.Errorf("recorded id = %s", cmds[1].ID)
	}
	if err := srv.CloseConn(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.r.ReadString('\n'); err == nil {
		t.Error("connection still open after CloseConn")
	}
}
