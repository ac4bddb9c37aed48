package qmp_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"
	"github.com/digitalocean/go-qemu/qmp/raw"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// listenFake serves srv on a unix socket in a temp dir and returns its path.
func listenFake(t *testing.T, srv *qmptest.Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	return sock
}

func TestGoQEMUDomainOverFake(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("query-status").Return(map[string]any{"status": "paused", "running": false, "singlestep": false})
	srv.On("query-version").Return(map[string]any{
		"qemu": map[string]int{"major": 7, "minor": 2, "micro": 22}, "package": "fake",
	})
	srv.On("query-qmp-schema").Return([]map[string]string{{"name": strings.Repeat("s", 256<<10)}})
	srv.On("device_del").Error("DeviceNotFound", "Device 'x' not found")

	mon := qmp.NewGoQEMUMonitor(listenFake(t, srv), qmp.Options{DefaultTimeout: 10 * time.Second})
	if err := mon.Connect(); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	d, err := qemu.NewDomain(mon, "fake")
	if err != nil {
		t.Fatalf("NewDomain: %v", err)
	}
	defer d.Close()

	if st, err := d.Status(); err != nil || st != qemu.StatusPaused {
		t.Fatalf("domain.Status = %v, %v; want paused", st, err)
	}
	if v, err := d.Version(); err != nil || v != "7.2.22" {
		t.Fatalf("domain.Version = %q, %v; want 7.2.22", v, err)
	}
	// go-qemu's own monitor dies on this 256 KiB reply.
	if _, err := raw.NewMonitor(mon).QueryQMPSchema(); err != nil {
		t.Fatalf("query-qmp-schema through raw.Monitor: %v", err)
	}
	// go-qemu callers get the QMP class too.
	_, err = mon.Run([]byte(`{"execute": "device_del", "arguments": {"id": "x"}}`))
	var qe *qmp.Error
	if !errors.As(err, &qe) || qe.Class != "DeviceNotFound" {
		t.Fatalf("Run(device_del) = %v, want DeviceNotFound", err)
	}

	// Domain events flow through the adapter.
	events, done, err := d.Events()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { done <- struct{}{} }()
	if err := srv.Emit("STOP", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Event != "STOP" || e.Timestamp.Seconds == 0 {
			t.Fatalf("domain event = %+v, want STOP with a timestamp", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no STOP event through go-qemu's Domain")
	}
}

func TestGoQEMUKeepsEventsBeforeEventsCall(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	received := make(chan struct{}, 1)
	mon := qmp.NewGoQEMUMonitor(listenFake(t, srv), qmp.Options{Tap: func(r qmp.Record) {
		if r.Kind == qmp.KindEvent {
			received <- struct{}{}
		}
	}})
	if err := mon.Connect(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mon.Disconnect(); err != nil {
			t.Errorf("Disconnect: %v", err)
		}
	}()
	if err := srv.Emit("RESUME", map[string]any{"x": 1}); err != nil {
		t.Fatal(err)
	}
	<-received // the client has read it; nobody has called Events yet

	ctx, cancel := context.WithCancel(t.Context())
	events, err := mon.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := <-events
	if e.Event != "RESUME" || e.Data["x"] != float64(1) {
		t.Fatalf("early event = %+v, want RESUME {x:1}", e)
	}
	cancel()
	for range events { // closes after ctx is cancelled
	}
}

func TestGoQEMUNotConnected(t *testing.T) {
	mon := qmp.NewGoQEMUMonitor(filepath.Join(t.TempDir(), "none.sock"), qmp.Options{})
	if _, err := mon.Run([]byte(`{"execute": "query-status"}`)); !errors.Is(err, qmp.ErrDisconnected) {
		t.Errorf("Run before Connect = %v, want ErrDisconnected", err)
	}
	if err := mon.Connect(); err == nil {
		t.Error("Connect to a missing socket succeeded")
	}
	if err := mon.Disconnect(); err != nil {
		t.Errorf("Disconnect before Connect = %v", err)
	}
}

func TestGoQEMUConnectIdempotentAndReconnect(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("query-status").Return(map[string]any{"status": "running", "running": true})
	mon := qmp.NewGoQEMUMonitor(listenFake(t, srv), qmp.Options{})
	if err := mon.Connect(); err != nil {
		t.Fatal(err)
	}
	first := mon.Monitor()
	if err := mon.Connect(); err != nil || mon.Monitor() != first {
		t.Fatalf("second Connect = %v, new monitor %v; want a no-op", err, mon.Monitor() != first)
	}
	if err := mon.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := mon.Run([]byte(`{"execute": "query-status"}`)); !errors.Is(err, qmp.ErrDisconnected) {
		t.Fatalf("Run after Disconnect = %v, want ErrDisconnected", err)
	}
	if err := mon.Connect(); err != nil {
		t.Fatalf("Connect after Disconnect: %v", err)
	}
	defer func() {
		if err := mon.Disconnect(); err != nil {
			t.Errorf("Disconnect: %v", err)
		}
	}()
	if _, err := mon.Run([]byte(`{"execute": "query-status"}`)); err != nil {
		t.Fatalf("Run after reconnect: %v", err)
	}
	if n := len(srv.Commands()); n != 3 { // two handshakes, one query-status
		t.Errorf("fake saw %d commands, want 3", n)
	}
}
