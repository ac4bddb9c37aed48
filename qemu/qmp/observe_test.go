package qmp_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// TestObserve: every replied command (the handshake's qmp_capabilities too) is observed once with its name, a positive duration and
// the QMP error of an error reply; a command without a reply is not.
func TestObserve(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("query-status").Return(map[string]any{"status": "running", "running": true})
	srv.On("device_del").Error("DeviceNotFound", "Device 'x' not found")
	srv.On("stop").NoReply()
	type obs struct {
		cmd   string
		took  time.Duration
		class string
	}
	var mu sync.Mutex
	var got []obs
	m := connect(t, srv, qmp.Options{CommandTimeouts: map[string]time.Duration{"stop": 50 * time.Millisecond},
		Observe: func(cmd string, took time.Duration, e *qmp.Error) {
			o := obs{cmd: cmd, took: took}
			if e != nil {
				o.class = e.Class
			}
			mu.Lock()
			got = append(got, o)
			mu.Unlock()
		}})
	ctx := ctxT(t, 5*time.Second)
	if err := m.Execute(ctx, "query-status", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Execute(ctx, "device_del", map[string]string{"id": "x"}, nil); err == nil {
		t.Fatal("device_del: no error")
	}
	if _, err := m.ExecuteRaw(ctx, []byte(`{"execute": "query-status"}`)); err != nil {
		t.Fatal(err)
	}
	if err := m.Execute(ctx, "stop", nil, nil); !errors.Is(err, qmp.ErrTimeout) {
		t.Fatalf("stop without reply: %v, want ErrTimeout", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []obs{{cmd: "qmp_capabilities"}, {cmd: "query-status"}, {cmd: "device_del", class: "DeviceNotFound"}, {cmd: "query-status"}}
	if len(got) != len(want) {
		t.Fatalf("observed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].cmd != want[i].cmd || got[i].class != want[i].class || got[i].took <= 0 {
			t.Errorf("observation %d = %+v, want %+v with a positive duration", i, got[i], want[i])
		}
	}
}
