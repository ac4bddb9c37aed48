package launcher

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qmp"
)

func TestMapStatus(t *testing.T) {
	cases := map[string]struct {
		state  pb.State
		reason string
	}{
		"running":        {pb.State_STATE_RUNNING, ""},
		"paused":         {pb.State_STATE_PAUSED, "user"},
		"prelaunch":      {pb.State_STATE_PAUSED, "start-paused"},
		"inmigrate":      {pb.State_STATE_MIGRATING_IN, "migration"},
		"postmigrate":    {pb.State_STATE_PAUSED, "postmigrate"},
		"finish-migrate": {pb.State_STATE_PAUSED, "migration"},
		"io-error":       {pb.State_STATE_PAUSED, "io-error"},
		"shutdown":       {pb.State_STATE_SHUTTING_DOWN, ""},
		"guest-panicked": {pb.State_STATE_CRASHED, "guest-panicked"},
		"internal-error": {pb.State_STATE_CRASHED, "internal-error"},
		"debug":          {pb.State_STATE_PAUSED, "debug"},
	}
	for in, want := range cases {
		s, r := mapStatus(in)
		if s != want.state || r != want.reason {
			t.Errorf("mapStatus(%q) = %v/%q, want %v/%q", in, s, r, want.state, want.reason)
		}
	}
}

func TestClassifyExit(t *testing.T) {
	cases := []struct {
		name     string
		info     qemu.ExitInfo
		intent   stopIntent
		code     int
		reason   string
		incoming bool
	}{
		{"guest powered off by itself", qemu.ExitInfo{Reason: qemu.ExitGuestShutdown}, stopNone, ExitOK, "guest-shutdown", false},
		{"guest powered off after sigterm", qemu.ExitInfo{Reason: qemu.ExitGuestShutdown}, stopShutdown, ExitOK, "guest-shutdown", false},
		{"grace ran out, quit", qemu.ExitInfo{Reason: qemu.ExitHostQuit}, stopShutdown, ExitForced, "forced", false},
		{"grace ran out, killed", qemu.ExitInfo{Reason: qemu.ExitCrash, Killed: true, Signal: syscall.SIGKILL}, stopShutdown, ExitForced, "forced", false},
		{"kill rpc", qemu.ExitInfo{Reason: qemu.ExitCrash, Killed: true, Signal: syscall.SIGKILL}, stopKill, ExitForced, "killed", false},
		{"killed from outside", qemu.ExitInfo{Reason: qemu.ExitCrash, Signal: syscall.SIGKILL}, stopNone, ExitQEMUDied, "crashed", false},
		{"qemu failed", qemu.ExitInfo{Reason: qemu.ExitCrash, Code: 1}, stopNone, ExitQEMUDied, "crashed", false},
		{"quit typed on qmp-debug", qemu.ExitInfo{Reason: qemu.ExitHostQuit}, stopNone, ExitQEMUDied, "qemu-quit", false},
		{"migrated away", qemu.ExitInfo{Reason: qemu.ExitHostQuit}, stopMigrated, ExitOK, "migrated", false},
		{"crash during the migrated quit", qemu.ExitInfo{Reason: qemu.ExitCrash, Code: 1}, stopMigrated, ExitQEMUDied, "crashed", false},
		{"target whose migration failed", qemu.ExitInfo{Reason: qemu.ExitCrash, Code: 1}, stopNone, ExitQEMUDied, "migration-failed", true},
		{"target killed while waiting", qemu.ExitInfo{Reason: qemu.ExitCrash, Killed: true}, stopKill, ExitForced, "killed", true},
		{"migrated target powered off", qemu.ExitInfo{Reason: qemu.ExitGuestShutdown}, stopNone, ExitOK, "guest-shutdown", false},
		{"guest panicked", qemu.ExitInfo{Reason: qemu.ExitGuestPanic, Code: 1}, stopNone, ExitGuestPanicked, "guest-panicked", false},
		{"guest panicked in the grace period", qemu.ExitInfo{Reason: qemu.ExitGuestPanic, Code: 1}, stopShutdown, ExitGuestPanicked, "guest-panicked", false},
		{"guest panicked under panic=shutdown", qemu.ExitInfo{Reason: qemu.ExitGuestPanic}, stopNone, ExitGuestPanicked, "guest-panicked", false},
	}
	for _, c := range cases {
		ex := classifyExit(c.info, c.intent, c.incoming)
		if ex.Code != c.code || ex.Reason != c.reason {
			t.Errorf("%s: %d/%s, want %d/%s", c.name, ex.Code, ex.Reason, c.code, c.reason)
		}
	}
}

func TestStatusRoundTrip(t *testing.T) {
	cases := []struct {
		err      error
		code     codes.Code
		sentinel error
	}{
		{fmt.Errorf("sync: %w", ErrNoDomain), codes.FailedPrecondition, ErrNoDomain},
		{fmt.Errorf("sync: %w", ErrDomainExists), codes.AlreadyExists, ErrDomainExists},
		{fmt.Errorf("add: %w", qemu.ErrDeviceExists), codes.AlreadyExists, ErrDeviceExists},
		{fmt.Errorf("rm: %w", qemu.ErrUnknownDevice), codes.NotFound, ErrUnknownDevice},
		{&qemu.SpecError{Field: "name", Reason: "bad"}, codes.InvalidArgument, ErrInvalidSpec},
		{fmt.Errorf("x: %w", &qemu.MigrationError{Status: "failed"}), codes.Aborted, ErrMigrationFailed},
		{fmt.Errorf("x: %w", qmp.ErrDisconnected), codes.FailedPrecondition, ErrQEMUExited},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ErrTimeout},
		{fmt.Errorf("x: %w: %w", ErrAgentCommand, &qmp.Error{Class: "GenericError"}), codes.Aborted, ErrAgentCommand},
		{fmt.Errorf("x: %w", ErrTapNotFound), codes.NotFound, ErrTapNotFound},
		// Not sent because the channel was busy, even when a deadline ended the wait in line.
		{fmt.Errorf("x: %w: %w", ErrAgentBusy, fmt.Errorf("%w (%w)", qga.ErrBusy, context.DeadlineExceeded)), codes.Unavailable, ErrAgentBusy},
		// A guest process outliving GuestExec's timeout is not a generic TIMEOUT.
		{&guestPIDError{pid: 7, err: fmt.Errorf("%w: %w", ErrExecTimeout, context.DeadlineExceeded)}, codes.DeadlineExceeded, ErrExecTimeout},
	}
	for _, c := range cases {
		st := toStatus(c.err)
		if s, _ := status.FromError(st); s.Code() != c.code {
			t.Errorf("%v: code %v, want %v", c.err, s.Code(), c.code)
		}
		back := fromStatus(st)
		if !errors.Is(back, c.sentinel) {
			t.Errorf("%v: came back as %v, not %v", c.err, back, c.sentinel)
		}
	}
	// A QMP error keeps its class.
	back := fromStatus(toStatus(fmt.Errorf("pause: %w", &qmp.Error{Class: "DeviceNotFound", Desc: "x"})))
	var re *RemoteError
	if !errors.As(back, &re) || !errors.Is(back, ErrQMP) || re.Metadata["class"] != "DeviceNotFound" {
		t.Errorf("qmp error came back as %#v", back)
	}
}

func TestEventLog(t *testing.T) {
	l := newEventLog()
	for i := range eventRetention + 10 {
		l.agent(i%2 == 0)
	}
	if _, err := l.since(0); !errors.Is(err, ErrEventsLost) {
		t.Errorf("since(0) after overflow: %v, want ErrEventsLost", err)
	}
	w, err := l.since(10)
	if err != nil || len(w.items) != eventRetention || w.items[0].GetSeq() != 11 || w.next != eventRetention+10 {
		t.Fatalf("since(10): %d items from %d, next %d, err %v", len(w.items), w.items[0].GetSeq(), w.next, err)
	}
	if _, err := l.since(eventRetention + 11); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("since(future): %v, want ErrInvalidRequest", err)
	}
	w, _ = l.since(l.last())
	select {
	case <-w.notify:
		t.Fatal("notify closed without a new event")
	default:
	}
	l.lifecycle(pb.State_STATE_RUNNING, "", "")
	<-w.notify // closed by the new event
	l.close()
	if e := l.agent(true); e != nil {
		t.Errorf("event emitted after close: %v", e)
	}
	if w, _ := l.since(l.last()); !w.closed {
		t.Error("window of a closed log is not closed")
	}
}

func TestFeedTailLimit(t *testing.T) {
	f := newFeed[int](5)
	for i := range 8 {
		f.add(func(uint64) int { return i })
	}
	w := f.since(0, 3)
	if fmt.Sprint(w.items) != "[5 6 7]" || w.next != 8 || w.lost != 3 {
		t.Errorf("since(0, 3) = %v next %d lost %d", w.items, w.next, w.lost)
	}
}

func TestBackoff(t *testing.T) {
	b := &backoff{min: 100 * time.Millisecond, max: time.Second}
	var got []time.Duration
	for range 7 {
		got = append(got, b.next())
	}
	want := "[100ms 200ms 400ms 800ms 1s 1s 1s]"
	if fmt.Sprint(got) != want {
		t.Errorf("back-off %v, want %s", got, want)
	}
	b.reset()
	if d := b.next(); d != 100*time.Millisecond {
		t.Errorf("after reset %v, want 100ms", d)
	}
}
