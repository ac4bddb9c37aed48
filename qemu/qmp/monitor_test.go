package qmp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// fake starts a scripted peer; the returned server is closed at cleanup.
func fake(t *testing.T, opts qmptest.Options) *qmptest.Server {
	t.Helper()
	srv := qmptest.NewServer(opts)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// connect runs the client handshake against srv over net.Pipe.
func connect(t *testing.T, srv *qmptest.Server, opts qmp.Options) *qmp.Monitor {
	t.Helper()
	m, err := qmp.New(ctxT(t, 5*time.Second), srv.Pipe(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// ctxT is a context bounded by d and by the test's end.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestGreetingAndCapabilities(t *testing.T) {
	srv := fake(t, qmptest.Options{Major: 9, Minor: 1, Micro: 3, Package: "v9.1.3-test", Capabilities: []string{"oob"}})
	m := connect(t, srv, qmp.Options{Capabilities: []string{"oob"}})

	g := m.Greeting()
	if g.Version.String() != "9.1.3" || g.Version.Package != "v9.1.3-test" {
		t.Errorf("greeting version = %+v, want 9.1.3 v9.1.3-test", g.Version)
	}
	if len(g.Capabilities) != 1 || g.Capabilities[0] != "oob" {
		t.Errorf("greeting capabilities = %v, want [oob]", g.Capabilities)
	}
	cmds := srv.Commands()
	if len(cmds) != 1 || cmds[0].Name != "qmp_capabilities" {
		t.Fatalf("commands = %+v, want one qmp_capabilities", cmds)
	}
	var args struct{ Enable []string }
	if err := json.Unmarshal(cmds[0].Args, &args); err != nil || len(args.Enable) != 1 || args.Enable[0] != "oob" {
		t.Errorf("qmp_capabilities arguments = %s (%v), want enable [oob]", cmds[0].Args, err)
	}
	if len(cmds[0].ID) == 0 {
		t.Errorf("qmp_capabilities sent without id: %s", cmds[0].Raw)
	}
	// The fake, like QEMU, refuses commands before negotiation: a command working now proves
	// the handshake completed.
	srv.On("query-status").Return(map[string]any{"status": "running", "running": true})
	if err := m.Execute(ctxT(t, 5*time.Second), "query-status", nil, nil); err != nil {
		t.Fatalf("query-status after handshake: %v", err)
	}
}

func TestCapabilitiesErrorFailsNew(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("qmp_capabilities").Error("GenericError", "Capability 'oob' not available")
	conn := srv.Pipe()
	_, err := qmp.New(ctxT(t, 5*time.Second), conn, qmp.Options{Capabilities: []string{"oob"}})
	var qe *qmp.Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Fatalf("New error = %v, want *qmp.Error GenericError", err)
	}
	// New closed the connection on failure.
	if _, err := conn.Write([]byte("x")); err == nil {
		t.Error("connection still open after failed New")
	}
}

func TestNoGreetingTimesOut(t *testing.T) {
	srv := fake(t, qmptest.Options{NoGreeting: true})
	start := time.Now()
	_, err := qmp.New(ctxT(t, 100*time.Millisecond), srv.Pipe(), qmp.Options{})
	if !errors.Is(err, qmp.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New without greeting = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("New took %s to time out after 100ms", d)
	}
}

func TestExecuteDecodesReply(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("query-status").Return(map[string]any{"status": "paused", "running": false})
	srv.On("device_add").WithArgs(map[string]any{"driver": "virtio-net-pci", "id": "nic1"}).Return(nil)
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, 5*time.Second)

	var st struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := m.Execute(ctx, "query-status", nil, &st); err != nil {
		t.Fatalf("query-status: %v", err)
	}
	if st.Status != "paused" || st.Running {
		t.Errorf("query-status = %+v, want paused, not running", st)
	}
	args := map[string]string{"driver": "virtio-net-pci", "id": "nic1"}
	if err := m.Execute(ctx, "device_add", args, nil); err != nil {
		t.Fatalf("device_add with matching arguments: %v", err)
	}
	// A typed nil pointer as args must not be sent as "arguments": null.
	var none *struct{}
	if err := m.Execute(ctx, "query-status", none, nil); err != nil {
		t.Fatalf("query-status with nil args: %v", err)
	}
	last := srv.Commands()[len(srv.Commands())-1]
	if last.Args != nil {
		t.Errorf("nil args sent as %s", last.Args)
	}
}

func TestErrorClassKept(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("device_del").Error("DeviceNotFound", "Device 'nope' not found")
	m := connect(t, srv, qmp.Options{})

	err := m.Execute(ctxT(t, 5*time.Second), "device_del", map[string]string{"id": "nope"}, nil)
	var qe *qmp.Error
	if !errors.As(err, &qe) {
		t.Fatalf("device_del error = %v (%T), want *qmp.Error", err, err)
	}
	if qe.Class != "DeviceNotFound" || qe.Desc != "Device 'nope' not found" {
		t.Errorf("error = %+v, want DeviceNotFound / Device 'nope' not found", qe)
	}
	if errors.Is(err, qmp.ErrDisconnected) || errors.Is(err, qmp.ErrTimeout) {
		t.Errorf("QMP error also matches a transport sentinel: %v", err)
	}
	// The unscripted command gets CommandNotFound from the fake, as from QEMU.
	err = m.Execute(ctxT(t, 5*time.Second), "no-such-command", nil, nil)
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("unknown command error = %v, want CommandNotFound", err)
	}
}

func TestLargeReply(t *testing.T) {
	big := strings.Repeat("x", 1<<20) // 1 MiB: go-qemu's scanner dies at 64 KiB
	srv := fake(t, qmptest.Options{})
	srv.On("query-qmp-schema").Return([]map[string]string{{"name": big}})
	srv.On("query-status").Return(map[string]any{"status": "running"})
	m := connect(t, srv, qmp.Options{})

	var schema []struct{ Name string }
	if err := m.Execute(ctxT(t, 10*time.Second), "query-qmp-schema", nil, &schema); err != nil {
		t.Fatalf("query-qmp-schema: %v", err)
	}
	if len(schema) != 1 || schema[0].Name != big {
		t.Fatalf("1 MiB reply came back wrong (%d entries)", len(schema))
	}
	// The connection is still usable afterwards.
	var st struct{ Status string }
	if err := m.Execute(ctxT(t, 5*time.Second), "query-status", nil, &st); err != nil || st.Status != "running" {
		t.Fatalf("query-status after large reply = %+v, %v", st, err)
	}
}

func TestOutOfOrderRepliesMatchedByID(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	release := make(chan struct{})
	srv.On("slow").After(release).Return("slow-reply")
	srv.On("fast").Return("fast-reply")
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, 10*time.Second)

	slow := make(chan string, 1)
	go func() {
		var s string
		if err := m.Execute(ctx, "slow", nil, &s); err != nil {
			s = "error: " + err.Error()
		}
		slow <- s
	}()
	if _, err := srv.WaitCommand(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	var fast string
	if err := m.Execute(ctx, "fast", nil, &fast); err != nil || fast != "fast-reply" {
		t.Fatalf("fast while slow pending = %q, %v; want fast-reply", fast, err)
	}
	select {
	case s := <-slow:
		t.Fatalf("slow returned before its reply was released: %q", s)
	default:
	}
	close(release)
	if s := <-slow; s != "slow-reply" {
		t.Fatalf("slow = %q, want slow-reply", s)
	}
}

func TestConcurrentExecute(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("echo").Do(func(c qmptest.Command) (any, *qmptest.Error) { return c.Args, nil })
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, 30*time.Second)

	const workers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				in := map[string]int{"w": w, "i": i}
				var out map[string]int
				if err := m.Execute(ctx, "echo", in, &out); err != nil {
					errs <- err
					return
				}
				if out["w"] != w || out["i"] != i {
					errs <- errors.New("reply for another command: " + mustJSON(out) + " for " + mustJSON(in))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(srv.Commands()); n != 1+workers*each {
		t.Errorf("fake saw %d commands, want %d", n, 1+workers*each)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
