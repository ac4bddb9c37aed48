package qemu

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// TestPanicArgv: each panic device is planned as its own -device with vmlet's id (and the
// pvpanic-pci at its fixed address), with -action panic=pause once; no device, no
// -action (QEMU's default is irrelevant when the guest cannot panic to it). Every element
// parses back to allow-listed keys (checkArgvInvariants).
func TestPanicArgv(t *testing.T) {
	const action = "-action panic=pause"
	isa := "-device pvpanic,id=panic_isa"
	pci := "-device pvpanic-pci,id=panic_pci,bus=pcie.0,addr=0xa"
	tests := []struct {
		name   string
		panic  []PanicModel
		want   []string // "flag value" pairs that must be there, in this order
		absent []string
	}{
		{"none", nil, nil, []string{"-action", "pvpanic"}},
		{"isa", []PanicModel{PanicISA}, []string{action, isa}, []string{"pvpanic-pci"}},
		{"pci", []PanicModel{PanicPCI}, []string{action, pci}, []string{"pvpanic,"}},
		{"both", []PanicModel{PanicPCI, PanicISA}, []string{action, pci, isa}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			s.Panic = tt.panic
			args, err := BuildArgv(&s, Env{Accel: tcgHost, FDs: FDs{QMP: 3}})
			if err != nil {
				t.Fatal(err)
			}
			checkArgvInvariants(t, &s, args)
			var pairs []string
			for i := 0; i+1 < len(args); i++ {
				pairs = append(pairs, args[i]+" "+args[i+1])
			}
			at := -1
			for _, w := range tt.want {
				i := slices.Index(pairs, w)
				if i <= at {
					t.Errorf("%q missing or out of order in %q", w, args)
				}
				at = i
			}
			if n := strings.Count(strings.Join(args, "\n"), "-action"); len(tt.panic) > 0 && n != 1 {
				t.Errorf("%d -action, want 1", n)
			}
			for _, a := range tt.absent {
				if strings.Contains(strings.Join(args, " "), a) {
					t.Errorf("%q in %q", a, args)
				}
			}
		})
	}
}

func TestValidatePanic(t *testing.T) {
	tests := []struct {
		panic []PanicModel
		field string // "" = valid
	}{
		{nil, ""},
		{[]PanicModel{PanicISA, PanicPCI}, ""},
		{[]PanicModel{PanicISA, PanicISA}, "panic[1]"},
		{[]PanicModel{"hyperv"}, "panic[0]"},
		{[]PanicModel{"isa,id=x"}, "panic[0]"},
		{[]PanicModel{""}, "panic[0]"},
	}
	for _, tt := range tests {
		s := baseSpec()
		s.Panic = tt.panic
		err := s.Validate()
		var se *SpecError
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%q: %v", tt.panic, err)
		case tt.field != "" && (!errors.As(err, &se) || se.Field != tt.field):
			t.Errorf("%q: error %v, want a SpecError on %s", tt.panic, err, tt.field)
		}
	}
}

// TestClassifyExitPanic: QEMU's exit after a SHUTDOWN event of reason guest-panic is
// ExitGuestPanic whether it exited PanicExitStatus (-action panic=exit-failure, vmlet's) or 0
// (QEMU's default panic=shutdown, which must not read as the guest powering off); any other
// status or a signal stays a crash, and a guest poweroff stays a guest shutdown.
func TestClassifyExitPanic(t *testing.T) {
	panicked := &shutdownEvent{Guest: true, Reason: "guest-panic"}
	poweroff := &shutdownEvent{Guest: true, Reason: "guest-shutdown"}
	tests := []struct {
		name string
		sh   string // the exiting process
		sd   *shutdownEvent
		want ExitReason
	}{
		{"panic, exit-failure", "exit 1", panicked, ExitGuestPanic},
		{"panic, default action", "exit 0", panicked, ExitGuestPanic},
		{"panic event, then another error", "exit 2", panicked, ExitCrash},
		{"panic event, then killed", "kill -9 $$", panicked, ExitCrash},
		{"guest poweroff", "exit 0", poweroff, ExitGuestShutdown},
		{"error without event", "exit 1", nil, ExitCrash},
		{"quit", "exit 0", &shutdownEvent{Reason: "host-qmp-quit"}, ExitHostQuit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tt.sh)
			_ = cmd.Run()
			info := classifyExit(&process{state: cmd.ProcessState}, tt.sd, false, "")
			if info.Reason != tt.want {
				t.Errorf("reason %s (code %d, signal %v), want %s", info.Reason, info.Code, info.Signal, tt.want)
			}
			if tt.sd != nil && info.ShutdownReason != tt.sd.Reason {
				t.Errorf("shutdown reason %q", info.ShutdownReason)
			}
		})
	}
}

// TestShutdownFrom: a GUEST_PANICKED of action pause (vmlet's) or poweroff stands for a
// SHUTDOWN of reason guest-panic, which no later SHUTDOWN replaces (the quit's after a pause,
// or QEMU's own); an earlier SHUTDOWN is not overridden by a panic.
func TestShutdownFrom(t *testing.T) {
	ev := func(name, data string) qmp.Event { return qmp.Event{Name: name, Data: json.RawMessage(data)} }
	quit := &shutdownEvent{Reason: "host-qmp-quit"}
	tests := []struct {
		name string
		e    qmp.Event
		prev *shutdownEvent
		want *shutdownEvent
	}{
		{"panic, poweroff", ev("GUEST_PANICKED", `{"action":"poweroff","info":{"type":"hyper-v"}}`), nil, &shutdownEvent{Guest: true, Reason: "guest-panic"}},
		{"panic, pause", ev("GUEST_PANICKED", `{"action":"pause"}`), nil, &shutdownEvent{Guest: true, Reason: "guest-panic"}},
		{"panic, run", ev("GUEST_PANICKED", `{"action":"run"}`), nil, nil},
		{"the quit after a panic", ev("SHUTDOWN", `{"guest":false,"reason":"host-qmp-quit"}`), &shutdownEvent{Guest: true, Reason: "guest-panic"}, nil},
		{"panic after a shutdown", ev("GUEST_PANICKED", `{"action":"poweroff"}`), quit, nil},
		{"shutdown after a panic", ev("SHUTDOWN", `{"guest":true,"reason":"guest-panic"}`), &shutdownEvent{Guest: true, Reason: "guest-panic"}, nil},
		{"shutdown", ev("SHUTDOWN", `{"guest":true,"reason":"guest-shutdown"}`), nil, &shutdownEvent{Guest: true, Reason: "guest-shutdown"}},
		{"shutdown, garbage", ev("SHUTDOWN", `[`), nil, nil},
		{"other event", ev("RESET", `{}`), nil, nil},
	}
	for _, tt := range tests {
		got := shutdownFrom(tt.e, tt.prev)
		if (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
