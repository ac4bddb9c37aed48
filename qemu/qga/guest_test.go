package qga_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// tapLog collects records for assertions.
type tapLog struct {
	mu   sync.Mutex
	recs []qmp.Record
}

func (l *tapLog) add(r qmp.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
}

func (l *tapLog) find(dir qmp.Direction, kind string, sub []byte) []qmp.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []qmp.Record
	for _, r := range l.recs {
		if r.Dir == dir && r.Kind == kind && bytes.Contains(r.Raw, sub) {
			out = append(out, r)
		}
	}
	return out
}

// TestRealGuestAgent runs the client against qemu-ga 7.2 in the busybox test guest.
func TestRealGuestAgent(t *testing.T) {
	prereq.QEMU(t)
	vm := testguest.Boot(t, testguest.BootOptions{NIC: true})
	if err := vm.Console.Wait(ctxT(t, 120*time.Second), testguest.MarkerReady); err != nil {
		t.Fatalf("guest not ready: %v", err)
	}
	var log tapLog
	a, err := qga.Dial(ctxT(t, 10*time.Second), vm.QGASocket, qga.Options{DefaultTimeout: 30 * time.Second, Tap: log.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	t.Run("ping and info", func(t *testing.T) {
		if err := a.Ping(ctxT(t, 30*time.Second)); err != nil {
			t.Fatalf("guest-ping: %v", err)
		}
		info, err := a.Info(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("guest-info: %v", err)
		}
		if !strings.HasPrefix(info.Version, "7.2") || !info.Supports("guest-exec") || !info.Supports("guest-shutdown") {
			t.Errorf("guest-info = version %q, %d commands; want 7.2.x with guest-exec and guest-shutdown",
				info.Version, len(info.SupportedCommands))
		}
		// qemu-ga echoes our ids: the client does not depend on the id-less fallback here.
		if got := log.find(qmp.Received, qmp.KindReply, []byte(`"id": "vmlet-`)); len(got) < 2 {
			t.Errorf("%d replies echoed our id, want all command replies (2)", len(got))
		}
	})

	var kernel string
	t.Run("osinfo and exec", func(t *testing.T) {
		os, err := a.OSInfo(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("guest-get-osinfo: %v", err)
		}
		if os.Machine != "x86_64" || !strings.HasSuffix(os.KernelRelease, "-cloud-amd64") {
			t.Errorf("guest-get-osinfo = %+v, want x86_64 and a Debian cloud kernel", os)
		}
		kernel = os.KernelRelease
		st, err := a.Run(ctxT(t, 60*time.Second), "uname", "-r")
		if err != nil {
			t.Fatalf("guest-exec uname -r: %v", err)
		}
		if !st.Exited || st.ExitCode != 0 || string(st.Stdout) != kernel+"\n" {
			t.Errorf("uname -r = %+v (stdout %q), want exit 0 and %q", st, st.Stdout, kernel)
		}
		st, err = a.Run(ctxT(t, 60*time.Second), "sh", "-c", "echo oops >&2; exit 7")
		if err != nil || st.ExitCode != 7 || string(st.Stderr) != "oops\n" {
			t.Errorf("sh exit 7 = %+v (stderr %q), %v", st, st.Stderr, err)
		}
		pid, err := a.Exec(ctxT(t, 30*time.Second), "cat", nil, []byte("piped through stdin"))
		if err != nil {
			t.Fatal(err)
		}
		st, err = waitExit(t, a, pid)
		if err != nil || string(st.Stdout) != "piped through stdin" {
			t.Errorf("cat with input = %q, %v", st.Stdout, err)
		}
	})

	t.Run("long exec leaves the agent answering", func(t *testing.T) {
		// qemu-ga runs guest-exec'd processes asynchronously: while one sleeps 5 s, pings sent
		// every 200 ms between Wait's guest-exec-status polls are answered at once.
		done := make(chan error, 1)
		var st qga.ExecStatus
		go func() {
			var err error
			st, err = a.Run(ctxT(t, 60*time.Second), "sh", "-c", "sleep 5; echo slept")
			done <- err
		}()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		var pings []time.Duration
		for running := true; running; {
			select {
			case err := <-done:
				if err != nil || st.ExitCode != 0 || string(st.Stdout) != "slept\n" {
					t.Fatalf("sleep 5 = %+v, %v", st, err)
				}
				running = false
				continue
			case <-tick.C:
			}
			start := time.Now()
			if err := a.Ping(ctxT(t, 2*time.Second)); err != nil {
				t.Fatalf("guest-ping %s into a 5 s exec: %v", time.Duration(len(pings))*200*time.Millisecond, err)
			}
			pings = append(pings, time.Since(start))
		}
		if len(pings) < 10 {
			t.Errorf("%d pings during a 5 s exec, want ≥ 10", len(pings))
		}
		slices.Sort(pings)
		t.Logf("guest-ping RTT during a 5 s exec: n=%d median %s max %s", len(pings), pings[len(pings)/2], pings[len(pings)-1])

		// A wait that ends before the process: ErrStillRunning, and the process runs on.
		pid, err := a.Exec(ctxT(t, 30*time.Second), "sleep", []string{"300"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Wait(ctxT(t, time.Second), pid); !errors.Is(err, qga.ErrStillRunning) || errors.Is(err, qga.ErrTimeout) {
			t.Fatalf("Wait for sleep 300 for 1 s = %v, want ErrStillRunning", err)
		}
		kill, err := a.Run(ctxT(t, 30*time.Second), "sh", "-c", fmt.Sprintf("kill -0 %d && kill %d", pid, pid))
		if err != nil || kill.ExitCode != 0 {
			t.Errorf("guest pid %d after the wait: %+v, %v; want still running", pid, kill, err)
		}
	})

	t.Run("network interfaces", func(t *testing.T) {
		if _, _, err := vm.Console.WaitLine(ctxT(t, 60*time.Second), 0, testguest.MarkerIP+" eth0 "); err != nil {
			t.Fatalf("no DHCP lease on eth0: %v", err)
		}
		ifs, err := a.NetworkInterfaces(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("guest-network-get-interfaces: %v", err)
		}
		addrs := map[string][]string{}
		macs := map[string]string{}
		for _, i := range ifs {
			macs[i.Name] = i.HardwareAddress
			for _, ip := range i.IPAddresses {
				addrs[i.Name] = append(addrs[i.Name], fmt.Sprintf("%s/%d", ip.Address, ip.Prefix))
			}
		}
		t.Logf("interfaces: %+v", ifs)
		if !contains(addrs["eth0"], "10.0.2.15/24") {
			t.Errorf("addresses = %v, want eth0 10.0.2.15/24", addrs)
		}
		// The guest never brings lo up: it is listed, without addresses.
		if mac, ok := macs["lo"]; !ok || mac != "00:00:00:00:00:00" || len(addrs["lo"]) != 0 {
			t.Errorf("lo = %q %v, want listed with no addresses", mac, addrs["lo"])
		}
		if macs["eth0"] != "52:54:00:12:34:56" { // QEMU's default MAC for the first NIC
			t.Errorf("eth0 MAC = %q", macs["eth0"])
		}
	})

	t.Run("users and fsinfo on busybox", func(t *testing.T) {
		// No utmp and no login on this guest: qemu-ga reports no users.
		users, err := a.Users(ctxT(t, 30*time.Second))
		if err != nil || len(users) != 0 {
			t.Errorf("guest-get-users = %+v, %v; want an empty list", users, err)
		}
		// Only virtual filesystems are mounted (rootfs, proc, sysfs, tmpfs; no disk): qemu-ga
		// reports none of them.
		fs, err := a.FSInfo(ctxT(t, 30*time.Second))
		if err != nil || len(fs) != 0 {
			t.Errorf("guest-get-fsinfo = %+v, %v; want an empty list on a diskless guest", fs, err)
		}
	})

	t.Run("stale reply after the agent stalls", func(t *testing.T) {
		// Freeze qemu-ga from the console shell, so a request goes unanswered.
		off := vm.Console.Len()
		fmt.Fprintf(vm.Serial, "kill -STOP $(pidof qemu-ga) && echo VMLET-QGA-$((40+2))-STOPPED\n")
		if _, err := vm.Console.WaitFrom(ctxT(t, 30*time.Second), off, "VMLET-QGA-42-STOPPED"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.OSInfo(ctxT(t, 500*time.Millisecond)); !errors.Is(err, qga.ErrTimeout) {
			t.Fatalf("guest-get-osinfo to a stopped agent = %v, want ErrTimeout", err)
		}
		lost := log.find(qmp.Sent, qmp.KindCommand, []byte("guest-get-osinfo"))
		lostID := lost[len(lost)-1].Raw
		lostID = lostID[bytes.Index(lostID, []byte(`"id":`)):]

		off = vm.Console.Len()
		fmt.Fprintf(vm.Serial, "kill -CONT $(pidof qemu-ga) && echo VMLET-QGA-$((40+2))-RESUMED\n")
		if _, err := vm.Console.WaitFrom(ctxT(t, 30*time.Second), off, "VMLET-QGA-42-RESUMED"); err != nil {
			t.Fatal(err)
		}
		// The agent now answers the stale request first; the client resyncs past it.
		st, err := a.Run(ctxT(t, 60*time.Second), "uname", "-r")
		if err != nil || string(st.Stdout) != kernel+"\n" {
			t.Fatalf("uname -r after the stall = %q, %v", st.Stdout, err)
		}
		stale := log.find(qmp.Received, qmp.KindUnknown, []byte(strings.ReplaceAll(string(lostID), `"id":`, `"id": `)))
		if len(stale) != 1 {
			t.Errorf("the late reply to the lost request (%s) was discarded %d times, want once", lostID, len(stale))
		}
	})

	t.Run("shutdown refused without /sbin/shutdown", func(t *testing.T) {
		// qemu-ga runs /sbin/shutdown, which busybox does not provide: the agent answers the
		// otherwise silent guest-shutdown with an error, and Shutdown must surface it.
		err := a.Shutdown(ctxT(t, 30*time.Second), "powerdown")
		var qe *qga.Error
		if !errors.As(err, &qe) || qe.Class != "GenericError" {
			t.Fatalf("guest-shutdown without /sbin/shutdown = %v, want a GenericError reply", err)
		}
		t.Logf("guest-shutdown refused: %s", qe.Desc)
		if err := a.Ping(ctxT(t, 30*time.Second)); err != nil {
			t.Fatalf("guest-ping after the refused shutdown: %v", err)
		}
	})

	t.Run("shutdown powers off", func(t *testing.T) {
		// Give the guest the /sbin/shutdown a distribution has.
		st, err := a.Run(ctxT(t, 60*time.Second), "sh", "-c",
			`printf '#!/bin/sh\nexec poweroff -f\n' >/sbin/shutdown && chmod +x /sbin/shutdown`)
		if err != nil || st.ExitCode != 0 {
			t.Fatalf("install /sbin/shutdown: %+v, %v", st, err)
		}
		m, err := qmp.Dial(ctxT(t, 30*time.Second), vm.QMPSocket, qmp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		w := m.Expect(qmp.EventNamed("SHUTDOWN"))
		defer w.Cancel()
		if err := a.Shutdown(ctxT(t, 60*time.Second), "powerdown"); err != nil {
			t.Fatalf("guest-shutdown: %v", err)
		}
		e, err := w.Wait(ctxT(t, 60*time.Second))
		if err != nil {
			t.Fatalf("no SHUTDOWN event after guest-shutdown: %v", err)
		}
		var d struct {
			Guest  bool   `json:"guest"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil || !d.Guest || d.Reason != "guest-shutdown" {
			t.Errorf("SHUTDOWN data = %s, want guest:true reason guest-shutdown", e.Data)
		}
		select {
		case <-vm.Exited():
		case <-ctxT(t, 60*time.Second).Done():
			t.Fatal("QEMU still running after the guest powered off")
		}
		if err := a.Ping(ctxT(t, 10*time.Second)); !errors.Is(err, qga.ErrDisconnected) {
			t.Errorf("guest-ping after QEMU exited = %v, want ErrDisconnected", err)
		}
	})
}

// waitExit polls guest-exec-status for pid until it exited.
func waitExit(t *testing.T, a *qga.Agent, pid int) (qga.ExecStatus, error) {
	ctx := ctxT(t, 60*time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil || st.Exited {
			return st, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
