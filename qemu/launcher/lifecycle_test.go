package launcher_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// bootDeadline bounds a TCG boot to the guest's READY marker on a busy 2-core machine.
const bootDeadline = 90 * time.Second

// console connects to the launcher's serial console socket (one client at a time).
func console(t testing.TB, p *proc) *testguest.Console {
	t.Helper()
	c, err := net.Dial("unix", p.paths.ConsoleSocket())
	if err != nil {
		t.Fatalf("connect console: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return testguest.NewConsole(c)
}

// syncGuest starts the test guest through Sync and returns the console (connected right
// after Sync, long before the guest prints anything worth waiting for).
func syncGuest(t testing.TB, p *proc, spec *pb.DomainSpec) (*pb.Domain, *testguest.Console) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := p.client.Sync(ctx, spec)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if !r.GetStarted() {
		t.Fatalf("first sync did not start the domain")
	}
	p.qemu = int(r.GetDomain().GetPid())
	return r.GetDomain(), console(t, p)
}

// TestDomain drives one booted guest through the API: Sync (and its idempotence), pause and
// resume, a qmp-debug.sock session concurrent with the API, raw QMP and the QMP log, disk and
// NIC hotplug, stats, the guest agent, reset; then SIGTERM with a cooperative guest: ACPI
// powerdown, clean exit 0 within the grace period, events in order, nothing left behind.
// The subtests share the VM and run in order.
func TestDomain(t *testing.T) {
	p := startLauncher(t, launchOpts{grace: 60 * time.Second})
	rec := watch(t, p.client, 0)
	spec := guestSpec(t, "domain")
	dom, con := syncGuest(t, p, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bootCtx, bootCancel := context.WithTimeout(ctx, bootDeadline)
	defer bootCancel()
	if err := con.Wait(bootCtx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}

	t.Run("get-domain", func(t *testing.T) {
		if dom.GetState() != pb.State_STATE_RUNNING || dom.GetAccel() != "tcg" || dom.GetAccelReason() == "" ||
			dom.GetQemuVersion() != hostQEMUVersion(t) || dom.GetPid() == 0 || dom.GetName() != "domain" {
			t.Errorf("domain after sync: %v", dom)
		}
	})
	t.Run("sync-idempotent", func(t *testing.T) {
		r, err := p.client.Sync(ctx, guestSpec(t, "domain"))
		if err != nil || r.GetStarted() || r.GetDomain().GetPid() != dom.GetPid() {
			t.Errorf("second sync with the same spec: started=%v err=%v, want a no-op", r.GetStarted(), err)
		}
		other := proto.Clone(spec).(*pb.DomainSpec)
		other.MemoryMib = 512
		if _, err := p.client.Sync(ctx, other); !errors.Is(err, launcher.ErrDomainExists) {
			t.Errorf("sync with another spec: %v, want ErrDomainExists", err)
		}
	})
	t.Run("pause-unpause", func(t *testing.T) {
		from := rec.len()
		logFrom := fileSize(t, p.paths.QMPLog())
		if d, err := p.client.Pause(ctx); err != nil || d.GetState() != pb.State_STATE_PAUSED || d.GetReason() != "user" {
			t.Fatalf("pause: %v/%q %v", d.GetState(), d.GetReason(), err)
		}
		if d, err := p.client.Unpause(ctx); err != nil || d.GetState() != pb.State_STATE_RUNNING {
			t.Fatalf("unpause: %v %v", d.GetState(), err)
		}
		i, err := rec.waitEvent(ctx, from, "paused", isState(pb.State_STATE_PAUSED))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rec.waitEvent(ctx, i+1, "running", isState(pb.State_STATE_RUNNING)); err != nil {
			t.Fatal(err)
		}
		// The STOP and RESUME the calls caused are not read back with query-status (the
		// replies already said the state): the QMP log has the two commands and their events.
		wire := qmpLogSince(t, p.paths.QMPLog(), logFrom)
		for _, want := range []string{`"execute":"stop"`, `"event": "STOP"`, `"execute":"cont"`, `"event": "RESUME"`} {
			if !strings.Contains(wire, want) {
				t.Errorf("QMP log of pause + unpause lacks %s:\n%s", want, wire)
			}
		}
		if strings.Contains(wire, "query-status") {
			t.Errorf("pause + unpause read the state back:\n%s", wire)
		}
	})
	t.Run("qmp-debug", func(t *testing.T) { debugSession(t, p, rec) })
	t.Run("qmp-rpc-and-log", func(t *testing.T) { qmpRPCs(t, p) })
	t.Run("vmctl", func(t *testing.T) { vmctlCommands(t, p) })
	t.Run("stats", func(t *testing.T) { domainStats(t, p) })
	t.Run("hotplug-disk", func(t *testing.T) { hotplugDisk(t, p, rec, con) })
	t.Run("hotplug-nic", func(t *testing.T) { hotplugNIC(t, p, rec, con) })
	t.Run("guest-agent", func(t *testing.T) { guestAgent(t, p, rec) })
	t.Run("reset", func(t *testing.T) {
		from, off := rec.len(), con.Len()
		if err := p.client.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.waitEvent(ctx, from, "reset", func(e *pb.Event) bool { return e.GetLifecycle().GetReason() == "reset" }); err != nil {
			t.Fatal(err)
		}
		bootCtx, bootCancel := context.WithTimeout(ctx, bootDeadline)
		defer bootCancel()
		if _, err := con.WaitFrom(bootCtx, off, testguest.MarkerReady); err != nil {
			t.Fatalf("guest did not boot again after reset: %v", err)
		}
		// The agent went away with the old guest and comes back with the new one.
		i, err := rec.waitEvent(bootCtx, from, "agent lost", isAgent(false))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rec.waitEvent(bootCtx, i+1, "agent back", isAgent(true)); err != nil {
			t.Fatal(err)
		}
	})

	from := rec.len()
	p.signal(syscall.SIGTERM)
	code, err := p.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != launcher.ExitOK {
		t.Errorf("exit code %d after SIGTERM with a cooperative guest, want 0", code)
	}
	if _, err := con.WaitFrom(ctx, 0, testguest.MarkerPoweroff); err != nil {
		t.Errorf("guest did not print %s: %v", testguest.MarkerPoweroff, err)
	}
	i, err := rec.waitEvent(ctx, from, "shutting down", isState(pb.State_STATE_SHUTTING_DOWN))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, i+1, "shutoff", func(e *pb.Event) bool {
		return isState(pb.State_STATE_SHUTOFF)(e) && e.GetLifecycle().GetReason() == "guest-shutdown"
	}); err != nil {
		t.Fatal(err)
	}
	<-rec.done // the stream ends when the launcher exits
	checkSequence(t, rec.snapshot())
	p.assertClean(t)
}

// checkSequence asserts events are numbered 1, 2, 3, ... with non-decreasing timestamps.
func checkSequence(t *testing.T, events []*pb.Event) {
	t.Helper()
	for i, e := range events {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.GetSeq())
		}
		if i > 0 && e.GetTimeUnixNano() < events[i-1].GetTimeUnixNano() {
			t.Errorf("event %d is older than event %d", i+1, i)
		}
	}
}

// fileSize is path's size now (where a later qmpLogSince starts).
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// qmpLogSince is what the QMP log at path gained after offset.
func qmpLogSince(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < offset {
		t.Fatalf("QMP log %s shrank (rotated?) from %d to %d bytes", path, offset, len(b))
	}
	return string(b[offset:])
}
