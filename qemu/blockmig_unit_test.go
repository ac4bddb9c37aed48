package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// fakeVM is a VM whose monitor is the scripted fake QMP peer, with disks recorded as if
// attached: "ovl" (qcow2), "scratch" (raw) and "cd" (read-only).
func fakeVM(t *testing.T) (*VM, *qmptest.Server) {
	t.Helper()
	srv := qmptest.NewServer(qmptest.Options{})
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mon, err := qmp.New(ctx, srv.Pipe(), qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Close() })
	vm := &VM{
		mon: mon, proc: &process{done: make(chan struct{})}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		disks: []Disk{
			{ID: ovlDisk, Path: "/x/ovl.qcow2", Format: FormatQCOW2},
			{ID: scratchDisk, Path: "/x/scratch.raw", Format: FormatRaw},
			{ID: "cd", Path: "/x/cd.iso", ReadOnly: true, CDROM: true},
		},
	}
	return vm, srv
}

func unitCtx(t *testing.T) context.Context { return ctxT(t, 10*time.Second) }

// sent is the names and arguments of the commands the fake received, qmp_capabilities and
// queries left out.
func sent(srv *qmptest.Server) []string {
	var out []string
	for _, c := range srv.Commands() {
		if c.Name == "qmp_capabilities" || c.Name == "query-status" || c.Name == "query-block-jobs" {
			continue
		}
		var args any
		_ = json.Unmarshal(c.Args, &args)
		b, _ := json.Marshal(args) // sorted keys
		out = append(out, c.Name+" "+string(b))
	}
	return out
}

func wantSent(t *testing.T, srv *qmptest.Server, want ...string) {
	t.Helper()
	if got := sent(srv); !slices.Equal(got, want) {
		t.Errorf("commands sent:\n  %s\nwant:\n  %s", join(got), join(want))
	}
}

func join(s []string) string {
	b, _ := json.MarshalIndent(s, "  ", "  ")
	return string(b)
}

func TestExportDisksCommands(t *testing.T) {
	vm, srv := fakeVM(t)
	srv.On("query-status").Return(map[string]any{"status": "inmigrate", "running": false})
	srv.On("nbd-server-start")
	srv.On("block-export-add")
	srv.On("nbd-server-stop")
	if err := vm.ExportDisks(unitCtx(t), "/run/v/nbd.sock", []string{ovlDisk, scratchDisk}); err != nil {
		t.Fatal(err)
	}
	if got := vm.Exports(); !slices.Equal(got, []string{ovlDisk, scratchDisk}) {
		t.Errorf("Exports() = %v", got)
	}
	if err := vm.ExportDisks(unitCtx(t), "/run/v/nbd2.sock", []string{ovlDisk}); !errors.Is(err, ErrWrongState) {
		t.Errorf("second ExportDisks = %v, want ErrWrongState", err)
	}
	if err := vm.StopNBDServer(unitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := vm.StopNBDServer(unitCtx(t)); err != nil { // none runs: no-op
		t.Fatal(err)
	}
	wantSent(t, srv,
		`nbd-server-start {"addr":{"data":{"path":"/run/v/nbd.sock"},"type":"unix"}}`,
		`block-export-add {"id":"e_ovl","name":"ovl","node-name":"d_ovl","type":"nbd","writable":true}`,
		`block-export-add {"id":"e_scratch","name":"scratch","node-name":"d_scratch","type":"nbd","writable":true}`,
		`nbd-server-stop null`,
	)
}

// TestExportDisksRefuses: bad ids, unknown or read-only disks, bad socket paths and a VM that
// is not an incoming target are refused before anything is started.
func TestExportDisksRefuses(t *testing.T) {
	vm, srv := fakeVM(t)
	status := "inmigrate"
	var mu sync.Mutex
	srv.On("query-status").Do(func(qmptest.Command) (any, *qmptest.Error) {
		mu.Lock()
		defer mu.Unlock()
		return map[string]any{"status": status, "running": status == "running"}, nil
	})
	for _, tc := range []struct {
		name   string
		socket string
		ids    []string
		want   error
	}{
		{"none", "/r/nbd.sock", nil, ErrInvalidSpec},
		{"injection", "/r/nbd.sock", []string{`ovl","x":"`}, ErrInvalidSpec},
		{"twice", "/r/nbd.sock", []string{ovlDisk, ovlDisk}, ErrInvalidSpec},
		{"unknown", "/r/nbd.sock", []string{"nope"}, ErrUnknownDevice},
		{"read-only", "/r/nbd.sock", []string{"cd"}, ErrInvalidSpec},
		{"relative socket", "nbd.sock", []string{ovlDisk}, ErrInvalidSpec},
		{"long socket", "/" + string(make([]byte, 120)), []string{ovlDisk}, ErrInvalidSpec},
	} {
		if err := vm.ExportDisks(unitCtx(t), tc.socket, tc.ids); !errors.Is(err, tc.want) {
			t.Errorf("%s: ExportDisks = %v, want %v", tc.name, err, tc.want)
		}
	}
	mu.Lock()
	status = "running"
	mu.Unlock()
	if err := vm.ExportDisks(unitCtx(t), "/r/nbd.sock", []string{ovlDisk}); !errors.Is(err, ErrWrongState) {
		t.Errorf("ExportDisks on a running vm = %v, want ErrWrongState", err)
	}
	wantSent(t, srv)
}

// TestExportDisksUndo: a failed export stops the NBD server again.
func TestExportDisksUndo(t *testing.T) {
	vm, srv := fakeVM(t)
	srv.On("query-status").Return(map[string]any{"status": "inmigrate", "running": false})
	srv.On("nbd-server-start")
	srv.On("block-export-add").Times(1)
	srv.On("block-export-add").Error("GenericError", "Permission conflict")
	srv.On("nbd-server-stop")
	err := vm.ExportDisks(unitCtx(t), "/r/nbd.sock", []string{ovlDisk, scratchDisk})
	var qe *qmp.Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Fatalf("ExportDisks = %v, want the QMP error", err)
	}
	if vm.Exports() != nil {
		t.Errorf("Exports() = %v after a failed export", vm.Exports())
	}
	wantSent(t, srv,
		`nbd-server-start {"addr":{"data":{"path":"/r/nbd.sock"},"type":"unix"}}`,
		`block-export-add {"id":"e_ovl","name":"ovl","node-name":"d_ovl","type":"nbd","writable":true}`,
		`block-export-add {"id":"e_scratch","name":"scratch","node-name":"d_scratch","type":"nbd","writable":true}`,
		`nbd-server-stop null`,
	)
}

// jobTable scripts query-block-jobs from a mutable table of jobs.
type jobTable struct {
	mu   sync.Mutex
	jobs map[string]blockJob
}

func newJobTable(srv *qmptest.Server) *jobTable {
	jt := &jobTable{jobs: map[string]blockJob{}}
	srv.On("query-block-jobs").Do(func(qmptest.Command) (any, *qmptest.Error) {
		jt.mu.Lock()
		defer jt.mu.Unlock()
		out := []blockJob{}
		for _, id := range slices.Sorted(mapsKeys(jt.jobs)) {
			out = append(out, jt.jobs[id])
		}
		return out, nil
	})
	return jt
}

func mapsKeys(m map[string]blockJob) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (jt *jobTable) set(j blockJob) {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	jt.jobs[j.Device] = j
}

func (jt *jobTable) remove(id string) {
	jt.mu.Lock()
	defer jt.mu.Unlock()
	delete(jt.jobs, id)
}

var mirrorOpts = MirrorOptions{NBDSocket: "/r/nbd.sock", Disks: mirrorDisks}

const (
	addOvl     = `blockdev-add {"driver":"nbd","export":"ovl","node-name":"b_ovl","server":{"path":"/r/nbd.sock","type":"unix"}}`
	addScratch = `blockdev-add {"driver":"nbd","export":"scratch","node-name":"b_scratch","server":{"path":"/r/nbd.sock","type":"unix"}}`
	mirrorOvl  = `blockdev-mirror {"copy-mode":"write-blocking","device":"d_ovl","job-id":"j_ovl","sync":"top","target":"b_ovl"}`
	mirrorScr  = `blockdev-mirror {"copy-mode":"write-blocking","device":"d_scratch","job-id":"j_scratch","sync":"full","target":"b_scratch"}`
)

// TestMirrorsLifecycle: StartMirrors sends a client node and a mirror per disk,
// WaitMirrorsReady returns once both jobs are ready (after BLOCK_JOB_READY), MirrorStatus
// reports progress, StopMirrors cancels both, waits for the jobs to end and removes the nodes.
func TestMirrorsLifecycle(t *testing.T) {
	vm, srv := fakeVM(t)
	jt := newJobTable(srv)
	srv.On("blockdev-add")
	srv.On("blockdev-mirror").Do(func(c qmptest.Command) (any, *qmptest.Error) {
		var a struct {
			Job string `json:"job-id"`
		}
		_ = json.Unmarshal(c.Args, &a)
		jt.set(blockJob{Device: a.Job, Type: "mirror", Status: "running", Len: 100})
		return map[string]any{}, nil
	})
	ctx := unitCtx(t)
	if err := vm.StartMirrors(ctx, mirrorOpts); err != nil {
		t.Fatal(err)
	}
	if err := vm.StartMirrors(ctx, mirrorOpts); !errors.Is(err, ErrWrongState) {
		t.Errorf("second StartMirrors = %v, want ErrWrongState", err)
	}
	done := make(chan error, 1)
	go func() { done <- vm.WaitMirrorsReady(ctx, nil) }()
	jt.set(blockJob{Device: "j_ovl", Type: "mirror", Status: "ready", Ready: true, Len: 100, Offset: 100})
	if err := srv.Emit("BLOCK_JOB_READY", map[string]any{"device": "j_ovl", "type": "mirror"}); err != nil {
		t.Fatal(err)
	}
	jt.set(blockJob{Device: "j_scratch", Type: "mirror", Status: "ready", Ready: true, Len: 64, Offset: 64})
	if err := srv.Emit("BLOCK_JOB_READY", map[string]any{"device": "j_scratch", "type": "mirror"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitMirrorsReady = %v", err)
	}
	p, err := vm.MirrorStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []MirrorProgress{{ID: ovlDisk, Status: "ready", Ready: true, Copied: 100, Total: 100}, {ID: scratchDisk, Status: "ready", Ready: true, Copied: 64, Total: 64}}
	if !slices.Equal(p, want) {
		t.Errorf("MirrorStatus = %+v, want %+v", p, want)
	}
	// block-job-cancel ends a job a moment later, with an event.
	srv.On("block-job-cancel").Do(func(c qmptest.Command) (any, *qmptest.Error) {
		var a struct {
			Device string `json:"device"`
		}
		_ = json.Unmarshal(c.Args, &a)
		go func() {
			jt.remove(a.Device)
			_ = srv.Emit("BLOCK_JOB_COMPLETED", map[string]any{"device": a.Device, "type": "mirror"})
		}()
		return map[string]any{}, nil
	})
	srv.On("blockdev-del")
	if err := vm.StopMirrors(ctx); err != nil {
		t.Fatal(err)
	}
	if m := vm.Mirrors(); len(m) != 0 {
		t.Errorf("Mirrors() = %v after StopMirrors", m)
	}
	wantSent(t, srv, addOvl, mirrorOvl, addScratch, mirrorScr,
		`block-job-cancel {"device":"j_ovl"}`, `block-job-cancel {"device":"j_scratch"}`,
		`blockdev-del {"node-name":"b_ovl"}`, `blockdev-del {"node-name":"b_scratch"}`)
}

// TestStartMirrorsUndo: when the second mirror cannot start, the first is cancelled and both
// client nodes are removed.
func TestStartMirrorsUndo(t *testing.T) {
	vm, srv := fakeVM(t)
	newJobTable(srv) // no jobs: the cancelled one is gone at once
	srv.On("blockdev-add")
	srv.On("blockdev-mirror").Times(1)
	srv.On("blockdev-mirror").Error("GenericError", "Source and target image have different sizes")
	srv.On("block-job-cancel")
	srv.On("blockdev-del")
	var qe *qmp.Error
	if err := vm.StartMirrors(unitCtx(t), mirrorOpts); !errors.As(err, &qe) {
		t.Fatalf("StartMirrors = %v, want the QMP error", err)
	}
	if m := vm.Mirrors(); len(m) != 0 {
		t.Errorf("Mirrors() = %v after a failed start", m)
	}
	wantSent(t, srv, addOvl, mirrorOvl, addScratch, mirrorScr,
		`blockdev-del {"node-name":"b_scratch"}`,
		`block-job-cancel {"device":"j_ovl"}`, `blockdev-del {"node-name":"b_ovl"}`)
}

// TestWaitMirrorsReadyFails: a BLOCK_JOB_ERROR, a job that vanished, and QEMU's exit end the
// wait with the matching error; StopMirrors tolerates a job that is gone (DeviceNotActive).
func TestWaitMirrorsReadyFails(t *testing.T) {
	vm, srv := fakeVM(t)
	jt := newJobTable(srv)
	srv.On("blockdev-add")
	srv.On("blockdev-mirror")
	jt.set(blockJob{Device: "j_ovl", Status: "running"})
	jt.set(blockJob{Device: "j_scratch", Status: "running"})
	ctx := unitCtx(t)
	if err := vm.StartMirrors(ctx, mirrorOpts); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- vm.WaitMirrorsReady(ctx, nil) }()
	if _, err := srv.WaitCommands(ctx, "query-block-jobs", 1); err != nil {
		t.Fatal(err)
	}
	if err := srv.Emit("BLOCK_JOB_ERROR", map[string]any{"device": "j_scratch", "operation": "write", "action": "report"}); err != nil {
		t.Fatal(err)
	}
	var me *MirrorError
	if err := <-done; !errors.As(err, &me) || me.Disk != scratchDisk || !errors.Is(err, ErrMirrorFailed) {
		t.Fatalf("WaitMirrorsReady after BLOCK_JOB_ERROR = %v, want a MirrorError for scratch", err)
	}
	jt.remove("j_scratch")
	if err := vm.WaitMirrorsReady(ctx, nil); !errors.As(err, &me) || me.Disk != scratchDisk {
		t.Errorf("WaitMirrorsReady with a vanished job = %v, want a MirrorError for scratch", err)
	}
	srv.On("block-job-cancel").WithArgs(map[string]any{"device": "j_scratch"}).Error("DeviceNotActive", "No active block job with id 'j_scratch'")
	srv.On("block-job-cancel").Do(func(qmptest.Command) (any, *qmptest.Error) {
		jt.remove("j_ovl")
		return map[string]any{}, nil
	})
	srv.On("blockdev-del")
	if err := vm.StopMirrors(ctx); err != nil {
		t.Fatalf("StopMirrors with a failed job = %v", err)
	}

	// QEMU exits while the wait runs.
	jt.set(blockJob{Device: "j_ovl", Status: "running"})
	jt.set(blockJob{Device: "j_scratch", Status: "running"})
	if err := vm.StartMirrors(ctx, mirrorOpts); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range srv.Commands() {
		if c.Name == "query-block-jobs" {
			n++
		}
	}
	go func() { done <- vm.WaitMirrorsReady(ctx, nil) }()
	if _, err := srv.WaitCommands(ctx, "query-block-jobs", n+1); err != nil {
		t.Fatal(err)
	}
	if err := srv.CloseConn(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrExited) {
		t.Errorf("WaitMirrorsReady after QEMU's exit = %v, want ErrExited", err)
	}
}
