package qemu

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// fakeCPUs scripts query-hotpluggable-cpus, device_add and device_del on the fake QMP peer as
// QEMU 7.2 answers them for a 1-core, 1-thread topology of max sockets: device_add fills a
// slot; device_del of an id in eject makes the "guest" eject it at once (DEVICE_DELETED of its
// lapic child, as QEMU 7.2 reports it), other unplugs stay pending.
type fakeCPUs struct {
	mu      sync.Mutex
	present map[int]string // socket → qom-path
	eject   map[string]bool
}

func newFakeCPUs(t *testing.T, srv *qmptest.Server, max int) *fakeCPUs {
	f := &fakeCPUs{present: map[int]string{0: "/machine/unattached/device[0]"}, eject: map[string]bool{}}
	srv.On("query-hotpluggable-cpus").Do(func(qmptest.Command) (any, *qmptest.Error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []map[string]any
		for s := max - 1; s >= 0; s-- { // QEMU lists the highest socket first
			e := map[string]any{"type": "qemu64-x86_64-cpu", "vcpus-count": 1,
				"props": map[string]any{"socket-id": s, "core-id": 0, "thread-id": 0, "node-id": 0}}
			if p, ok := f.present[s]; ok {
				e["qom-path"] = p
			}
			out = append(out, e)
		}
		return out, nil
	})
	srv.On("device_add").Do(func(c qmptest.Command) (any, *qmptest.Error) {
		var a struct {
			ID     string `json:"id"`
			Socket int    `json:"socket-id"`
		}
		_ = json.Unmarshal(c.Args, &a)
		f.mu.Lock()
		f.present[a.Socket] = "/machine/peripheral/" + a.ID
		f.mu.Unlock()
		return map[string]any{}, nil
	})
	srv.On("device_del").Do(func(c qmptest.Command) (any, *qmptest.Error) {
		var a struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(c.Args, &a)
		f.mu.Lock()
		ejects := f.eject[a.ID]
		f.mu.Unlock()
		if ejects {
			go func() {
				f.remove(a.ID)
				_ = srv.Emit("DEVICE_DELETED", map[string]any{"path": "/machine/peripheral/" + a.ID + "/lapic"})
			}()
		}
		return map[string]any{}, nil
	})
	return f
}

func (f *fakeCPUs) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, p := range f.present {
		if p == "/machine/peripheral/"+id {
			delete(f.present, s)
		}
	}
}

func TestSetCPUsPlugUnplugPending(t *testing.T) {
	vm, srv := fakeVM(t)
	vm.spec.CPU = CPU{Model: "qemu64", Sockets: 1, MaxSockets: 3}
	vm.resolved.Accel = accel.KVM
	f := newFakeCPUs(t, srv, 3)
	st, err := vm.SetCPUs(unitCtx(t), 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st != (CPUStatus{Sockets: 3, Cores: 1, Threads: 1, MaxSockets: 3}) {
		t.Errorf("after plugging to 3: %+v", st)
	}
	wantSent(t, srv,
		`query-hotpluggable-cpus null`,
		`device_add {"core-id":0,"driver":"qemu64-x86_64-cpu","id":"cpu_s1_c0_t0","socket-id":1,"thread-id":0}`,
		`device_add {"core-id":0,"driver":"qemu64-x86_64-cpu","id":"cpu_s2_c0_t0","socket-id":2,"thread-id":0}`,
		`query-hotpluggable-cpus null`)
	if s := vm.MigrationSpec().CPU; s.Sockets != 1 || s.PluggedSockets != 2 {
		t.Errorf("migration spec cpu %+v, want 1 + 2 plugged", s)
	}

	// The guest ejects socket 2 but holds on to socket 1: SetCPUs waits (bounded), then says
	// one unplug is pending, and answers without an error.
	f.mu.Lock()
	f.eject["cpu_s2_c0_t0"] = true
	f.mu.Unlock()
	t0 := time.Now()
	st, err = vm.SetCPUs(unitCtx(t), 1, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sockets != 2 || st.UnplugPending != 1 {
		t.Errorf("after asking for 1 with a guest that keeps socket 1: %+v, want 2 sockets, 1 pending", st)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("answered after %s, before the unplug wait passed", d)
	}
	if s := vm.MigrationSpec().CPU; s.Sockets+s.PluggedSockets != 2 {
		t.Errorf("migration spec cpu %+v, want 2 sockets (a pending unplug is still present)", s)
	}

	// Asked again, the pending unplug is not requested twice; once the guest let go (its event
	// unheard), the query finds the vCPU gone and nothing is pending.
	n := len(sent(srv))
	f.remove("cpu_s1_c0_t0")
	st, err = vm.SetCPUs(unitCtx(t), 1, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sent(srv)[n:] {
		if c != "query-hotpluggable-cpus null" {
			t.Errorf("second SetCPUs(1) sent %s", c)
		}
	}
	if st.Sockets != 1 || st.UnplugPending != 0 {
		t.Errorf("after the guest released socket 1: %+v", st)
	}
}

// Under TCG with QEMU 10 vCPUs unplug, and once one was unplugged a plug is refused without a
// word to QEMU (QEMU could no longer migrate); an unplug still goes. Under KVM it plugs.
func TestSetCPUsTCGPlugAfterUnplug(t *testing.T) {
	vm, srv := fakeVM(t)
	vm.spec.CPU = CPU{Model: "qemu64", Sockets: 1, MaxSockets: 4}
	vm.resolved.Accel = accel.TCG
	vm.version = "10.0.2"
	f := newFakeCPUs(t, srv, 4)
	f.eject["cpu_s1_c0_t0"], f.eject["cpu_s2_c0_t0"], f.eject["cpu_s3_c0_t0"] = true, true, true
	for _, step := range []struct {
		sockets int
		refused bool
	}{{4, false}, {4, false}, {2, false}, {3, true}, {4, true}, {2, false}, {1, false}} {
		n := len(sent(srv))
		st, err := vm.SetCPUs(unitCtx(t), step.sockets, time.Second)
		if step.refused {
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "after a vcpu unplug") {
				t.Fatalf("SetCPUs(%d) after an unplug: %v, want ErrUnsafe saying why", step.sockets, err)
			}
			for _, c := range sent(srv)[n:] {
				if !strings.HasPrefix(c, "query-hotpluggable-cpus") {
					t.Errorf("refused SetCPUs(%d) sent %s", step.sockets, c)
				}
			}
			continue
		}
		if err != nil || st.Sockets != step.sockets {
			t.Fatalf("SetCPUs(%d) = %+v, %v", step.sockets, st, err)
		}
	}
	vm.resolved.Accel = accel.KVM
	if st, err := vm.SetCPUs(unitCtx(t), 3, time.Second); err != nil || st.Sockets != 3 {
		t.Errorf("SetCPUs(3) under kvm after an unplug: %+v, %v", st, err)
	}
}

func TestTCGUnplugCrashes(t *testing.T) {
	for _, c := range []struct {
		accel, version string
		want           bool
	}{
		{"tcg", "7.2.22", true}, {"tcg", "9.2.0", true}, {"tcg", "", true}, {"tcg", "x.1", true},
		{"tcg", "10.0.2", false}, {"tcg", "11.0.0", false}, {"kvm", "7.2.22", false},
	} {
		if got := TCGUnplugCrashes(c.accel, c.version); got != c.want {
			t.Errorf("TCGUnplugCrashes(%q, %q) = %v, want %v", c.accel, c.version, got, c.want)
		}
	}
}

func TestSetCPUsRefusals(t *testing.T) {
	vm, srv := fakeVM(t)
	vm.spec.CPU = CPU{Model: "qemu64", Sockets: 1, MaxSockets: 2}
	vm.resolved.Accel = accel.TCG
	vm.version = "7.2.22"
	newFakeCPUs(t, srv, 2)
	if _, err := vm.SetCPUs(unitCtx(t), 2, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.SetCPUs(unitCtx(t), 1, time.Second); !errors.Is(err, ErrUnsafe) {
		t.Errorf("unplug under tcg on qemu 7.2: %v, want ErrUnsafe", err)
	}
	var se *SpecError
	for _, n := range []int{0, 3} {
		if _, err := vm.SetCPUs(unitCtx(t), n, time.Second); !errors.As(err, &se) || se.Field != "sockets" {
			t.Errorf("SetCPUs(%d): %v, want a *SpecError for sockets", n, err)
		}
	}
	for _, c := range sent(srv) {
		if strings.HasPrefix(c, "device_del") {
			t.Errorf("sent %s", c)
		}
	}
	vm.spec.CPU.MaxSockets = 0
	if _, err := vm.SetCPUs(unitCtx(t), 1, time.Second); !errors.Is(err, ErrNotHotpluggable) {
		t.Errorf("without cpu hotplug: %v, want ErrNotHotpluggable", err)
	}
	vm.spec.MemoryHotplug = nil
	if _, err := vm.SetMemory(unitCtx(t), 2); !errors.Is(err, ErrNotHotpluggable) {
		t.Errorf("SetMemory without memory hotplug: %v, want ErrNotHotpluggable", err)
	}
}
