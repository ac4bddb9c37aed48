package qmp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

func TestTapRecordsEveryLine(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("stop").Emit("STOP", nil)
	var mu sync.Mutex
	var recs []qmp.Record
	m := connect(t, srv, qmp.Options{Tap: func(r qmp.Record) {
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}})
	if _, err := m.ExecuteAndWait(ctxT(t, 5*time.Second), "stop", nil, nil, qmp.EventNamed("STOP")); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()

	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		dir  qmp.Direction
		kind string
		has  string
	}{
		{qmp.Received, qmp.KindGreeting, `"QMP"`},
		{qmp.Sent, qmp.KindCommand, `"qmp_capabilities"`},
		{qmp.Received, qmp.KindReply, `"return"`},
		{qmp.Sent, qmp.KindCommand, `"stop"`},
		{qmp.Received, qmp.KindEvent, `"STOP"`},
		{qmp.Received, qmp.KindReply, `"return"`},
	}
	if len(recs) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		r := recs[i]
		if r.Dir != w.dir || r.Kind != w.kind || !bytes.Contains(r.Raw, []byte(w.has)) || r.Time.IsZero() {
			t.Errorf("record %d = %s %s %s, want %s %s containing %s", i, r.Dir, r.Kind, r.Raw, w.dir, w.kind, w.has)
		}
		if bytes.HasSuffix(r.Raw, []byte("\n")) || !json.Valid(r.Raw) {
			t.Errorf("record %d is not one bare JSON line: %q", i, r.Raw)
		}
	}
}

func TestExecuteRaw(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("query-version").Return(map[string]any{"qemu": map[string]int{"major": 7}})
	srv.On("device_del").Error("DeviceNotFound", "Device 'x' not found")
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, 5*time.Second)

	out, err := m.ExecuteRaw(ctx, []byte(`{"execute": "query-version", "id": "user-id"}`))
	if err != nil {
		t.Fatalf("ExecuteRaw: %v", err)
	}
	var r struct {
		Return struct{ QEMU struct{ Major int } }
		ID     string
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Return.QEMU.Major != 7 || r.ID == "" || r.ID == "user-id" {
		t.Fatalf("raw reply %s (%v), want return.qemu.major 7 and our id", out, err)
	}
	out, err = m.ExecuteRaw(ctx, []byte(`{"execute": "device_del", "arguments": {"id": "x"}}`))
	var qe *qmp.Error
	if !errors.As(err, &qe) || qe.Class != "DeviceNotFound" || !bytes.Contains(out, []byte("DeviceNotFound")) {
		t.Fatalf("raw error reply = %s, %v; want the raw line and DeviceNotFound", out, err)
	}
	for _, bad := range []string{`not json`, `[1]`, `null`, `{"arguments": {}}`, `{"execute": 5}`} {
		if _, err := m.ExecuteRaw(ctx, []byte(bad)); err == nil {
			t.Errorf("ExecuteRaw(%s) succeeded", bad)
		}
	}
	if m.Err() != nil {
		t.Fatalf("connection lost after bad raw input: %v", m.Err())
	}
}

// socketpair returns both ends of a connected unix stream socketpair as net.Conns.
func socketpair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("socketpair conn: %v", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

func TestFilePassingOverSocketpair(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("getfd")
	client, server := socketpair(t)
	go srv.ServeConn(server)
	m, err := qmp.New(ctxT(t, 5*time.Second), client, qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := m.ExecuteWithFiles(ctxT(t, 5*time.Second), "getfd", map[string]string{"fdname": "pipe0"}, nil, w); err != nil {
		t.Fatalf("getfd with a file: %v", err)
	}
	got, err := srv.WaitCommand(ctxT(t, 5*time.Second), "getfd")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 1 {
		t.Fatalf("fake received %d files with getfd, want 1", len(got.Files))
	}
	// The received descriptor is the same pipe: what the fake writes, we read.
	if _, err := got.Files[0].Write([]byte("through scm_rights")); err != nil {
		t.Fatalf("write to received fd: %v", err)
	}
	buf := make([]byte, 18)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "through scm_rights" {
		t.Fatalf("read from pipe = %q, %v", buf, err)
	}
	// The caller still owns its file.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Errorf("our copy of the file closed by ExecuteWithFiles: %v", err)
	}
}

func TestFilePassingOverUnixSocketPath(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("add-fd").Return(map[string]int{"fdset-id": 1, "fd": 42})
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	m, err := qmp.Dial(ctxT(t, 5*time.Second), sock, qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	f1, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	var reply struct {
		FdsetID int `json:"fdset-id"`
	}
	if err := m.ExecuteWithFiles(ctxT(t, 5*time.Second), "add-fd", map[string]int{"fdset-id": 1}, &reply, f1, f2); err != nil || reply.FdsetID != 1 {
		t.Fatalf("add-fd = %+v, %v", reply, err)
	}
	got, err := srv.WaitCommand(ctxT(t, 5*time.Second), "add-fd")
	if err != nil || len(got.Files) != 2 {
		t.Fatalf("fake got %d files (%v), want 2", len(got.Files), err)
	}
}

func TestFilePassingNeedsUnixSocket(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("getfd")
	m := connect(t, srv, qmp.Options{}) // net.Pipe
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = m.ExecuteWithFiles(ctxT(t, 5*time.Second), "getfd", map[string]string{"fdname": "x"}, nil, f)
	if !errors.Is(err, qmp.ErrNotUnixSocket) {
		t.Fatalf("ExecuteWithFiles over net.Pipe = %v, want ErrNotUnixSocket", err)
	}
	if err := m.Execute(ctxT(t, 5*time.Second), "getfd", map[string]string{"fdname": "x"}, nil); err != nil {
		t.Fatalf("connection unusable after refused file passing: %v", err)
	}
	if n := len(srv.Commands()); n != 2 {
		t.Errorf("fake saw %d commands, want 2 (the refused one must not be sent)", n)
	}
}
