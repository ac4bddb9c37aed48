package qmp_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"

	"github.com/vmlet/vmlet/qemu/qmp"
)

type status struct {
	Status  string `json:"status"`
	Running bool   `json:"running"`
}

func dialQEMU(t *testing.T, q *qemuProc, opts qmp.Options) *qmp.Monitor {
	t.Helper()
	m, err := qmp.Dial(ctxT(t, 30*time.Second), q.Sock, opts)
	if err != nil {
		t.Fatalf("dial qemu: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestQEMUStatusStopContEvents(t *testing.T) {
	q := startQEMU(t)
	m := dialQEMU(t, q, qmp.Options{})
	ctx := ctxT(t, 30*time.Second)

	if g := m.Greeting(); g.Version.Major < 7 || len(g.Capabilities) == 0 {
		t.Errorf("greeting = %+v, want QEMU >= 7 offering capabilities", g)
	}
	var st status
	if err := m.Execute(ctx, "query-status", nil, &st); err != nil || st.Status != "prelaunch" || st.Running {
		t.Fatalf("query-status under -S = %+v, %v; want prelaunch", st, err)
	}
	if _, err := m.ExecuteAndWait(ctx, "cont", nil, nil, qmp.EventNamed("RESUME")); err != nil {
		t.Fatalf("cont → RESUME: %v", err)
	}
	if err := m.Execute(ctx, "query-status", nil, &st); err != nil || st.Status != "running" || !st.Running {
		t.Fatalf("query-status after cont = %+v, %v; want running", st, err)
	}
	e, err := m.ExecuteAndWait(ctx, "stop", nil, nil, qmp.EventNamed("STOP"))
	if err != nil {
		t.Fatalf("stop → STOP: %v", err)
	}
	if d := time.Since(e.Timestamp); e.Timestamp.IsZero() || d < -time.Minute || d > time.Minute {
		t.Errorf("STOP timestamp %v is not QEMU's clock of now", e.Timestamp)
	}
	if err := m.Execute(ctx, "query-status", nil, &st); err != nil || st.Status != "paused" || st.Running {
		t.Fatalf("query-status after stop = %+v, %v; want paused", st, err)
	}
}

func TestQEMULargeReply(t *testing.T) {
	q := startQEMU(t)
	var mu sync.Mutex
	longest := 0
	m := dialQEMU(t, q, qmp.Options{Tap: func(r qmp.Record) {
		mu.Lock()
		longest = max(longest, len(r.Raw))
		mu.Unlock()
	}})
	var schema []struct {
		Name     string `json:"name"`
		MetaType string `json:"meta-type"`
	}
	if err := m.Execute(ctxT(t, 30*time.Second), "query-qmp-schema", nil, &schema); err != nil {
		t.Fatalf("query-qmp-schema: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if longest <= 64<<10 {
		t.Errorf("longest line %d bytes; the test needs a reply over 64 KiB", longest)
	}
	found := false
	for _, s := range schema {
		found = found || (s.Name == "query-status" && s.MetaType == "command")
	}
	if !found {
		t.Errorf("query-status command not in the %d-entry schema", len(schema))
	}
	t.Logf("query-qmp-schema: %d entries, %d bytes on one line", len(schema), longest)
}

func TestQEMUErrorClasses(t *testing.T) {
	q := startQEMU(t)
	m := dialQEMU(t, q, qmp.Options{})
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		cmd   string
		args  any
		class string
	}{
		{"device_del", map[string]string{"id": "nope"}, "DeviceNotFound"},
		{"no-such-command", nil, "CommandNotFound"},
		{"device_add", map[string]string{"driver": "no-such-driver"}, "GenericError"},
	} {
		err := m.Execute(ctx, tc.cmd, tc.args, nil)
		var qe *qmp.Error
		if !errors.As(err, &qe) || qe.Class != tc.class || qe.Desc == "" {
			t.Errorf("%s: error = %v, want class %s", tc.cmd, err, tc.class)
		}
	}
	if m.Err() != nil {
		t.Fatalf("connection lost after error replies: %v", m.Err())
	}
}

func TestQEMUGetfdPassesRealDescriptor(t *testing.T) {
	q := startQEMU(t)
	m := dialQEMU(t, q, qmp.Options{})
	ctx := ctxT(t, 30*time.Second)

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pipeIno := statIno(t, r)
	before := countFDsTo(t, q.Cmd.Process.Pid, pipeIno)

	if err := m.ExecuteWithFiles(ctx, "getfd", map[string]string{"fdname": "pipe0"}, nil, w); err != nil {
		t.Fatalf("getfd: %v", err)
	}
	if n := countFDsTo(t, q.Cmd.Process.Pid, pipeIno); n != before+1 {
		t.Fatalf("QEMU holds %d descriptors to our pipe after getfd, want %d", n, before+1)
	}
	if err := m.Execute(ctx, "closefd", map[string]string{"fdname": "pipe0"}, nil); err != nil {
		t.Fatalf("closefd of the passed fd: %v", err)
	}
	if n := countFDsTo(t, q.Cmd.Process.Pid, pipeIno); n != before {
		t.Errorf("QEMU holds %d descriptors to our pipe after closefd, want %d", n, before)
	}
	err = m.Execute(ctx, "closefd", map[string]string{"fdname": "pipe0"}, nil)
	var qe *qmp.Error
	if !errors.As(err, &qe) {
		t.Errorf("second closefd = %v, want a QMP error", err)
	}

	var added struct {
		FdsetID int `json:"fdset-id"`
	}
	if err := m.ExecuteWithFiles(ctx, "add-fd", map[string]int{"fdset-id": 7}, &added, r); err != nil || added.FdsetID != 7 {
		t.Fatalf("add-fd = %+v, %v", added, err)
	}
	var sets []struct {
		FdsetID int `json:"fdset-id"`
		Fds     []struct{ Fd int }
	}
	if err := m.Execute(ctx, "query-fdsets", nil, &sets); err != nil || len(sets) != 1 || sets[0].FdsetID != 7 || len(sets[0].Fds) != 1 {
		t.Fatalf("query-fdsets = %+v, %v; want fdset 7 with one fd", sets, err)
	}
}

func statIno(t *testing.T, f *os.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// countFDsTo counts pid's descriptors that point at pipe inode ino (/proc/pid/fd links).
func countFDsTo(t *testing.T, pid int, ino uint64) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pipe:[%d]", ino)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
			n++
		}
	}
	return n
}

func TestQEMUQuitClosesDone(t *testing.T) {
	q := startQEMU(t)
	m := dialQEMU(t, q, qmp.Options{})
	events, cancel := m.Subscribe(qmp.EventNamed("SHUTDOWN"))
	defer cancel()
	if err := m.Execute(ctxT(t, 30*time.Second), "quit", nil, nil); err != nil {
		t.Fatalf("quit: %v", err)
	}
	select {
	case <-m.Done():
	case <-ctxT(t, 30*time.Second).Done():
		t.Fatal("Done not closed after quit")
	}
	if !errors.Is(m.Err(), qmp.ErrDisconnected) {
		t.Errorf("Err after quit = %v, want ErrDisconnected", m.Err())
	}
	if e, ok := <-events; !ok || e.Name != "SHUTDOWN" {
		t.Errorf("no SHUTDOWN event delivered after the connection closed (%+v, %v)", e, ok)
	}
	select {
	case <-q.Exited():
		if q.err != nil {
			t.Errorf("qemu exit after quit: %v", q.err)
		}
	case <-ctxT(t, 30*time.Second).Done():
		t.Fatal("qemu did not exit after quit")
	}
	if err := m.Execute(ctxT(t, 5*time.Second), "query-status", nil, nil); !errors.Is(err, qmp.ErrDisconnected) {
		t.Errorf("Execute after quit = %v, want ErrDisconnected", err)
	}
}

func TestQEMUConcurrentAndOOB(t *testing.T) {
	q := startQEMU(t)
	m := dialQEMU(t, q, qmp.Options{Capabilities: []string{"oob"}})
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 25 {
				var st status
				if err := m.Execute(ctx, "query-status", nil, &st); err != nil {
					errs <- err
					return
				}
				if st.Status != "prelaunch" {
					errs <- fmt.Errorf("status %q", st.Status)
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
	// With oob negotiated, exec-oob commands are accepted too.
	out, err := m.ExecuteRaw(ctx, []byte(`{"exec-oob": "migrate-pause"}`))
	var qe *qmp.Error
	if !errors.As(err, &qe) || !strings.Contains(string(out), qe.Class) {
		t.Errorf("exec-oob migrate-pause without a migration = %s, %v; want a QMP error reply", out, err)
	}
}

func TestQEMUGoQEMUDomain(t *testing.T) {
	q := startQEMU(t)
	mon := qmp.NewGoQEMUMonitor(q.Sock, qmp.Options{DefaultTimeout: 30 * time.Second})
	if err := mon.Connect(); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	d, err := qemu.NewDomain(mon, "real")
	if err != nil {
		t.Fatalf("NewDomain: %v", err)
	}
	defer d.Close()
	if st, err := d.Status(); err != nil || st != qemu.StatusPreLaunch {
		t.Fatalf("domain.Status = %v, %v; want prelaunch", st, err)
	}
	v, err := d.Version()
	if err != nil || v != mon.Monitor().Greeting().Version.String() {
		t.Fatalf("domain.Version = %q, %v; want %s", v, err, mon.Monitor().Greeting().Version)
	}
	cmds, err := d.Commands()
	if err != nil || len(cmds) < 100 {
		t.Fatalf("domain.Commands = %d commands, %v", len(cmds), err)
	}
}
