package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// Non-shared-storage migration, source side (the target side and the whole sequence are in
// nbd.go): each node-local writable disk is mirrored into the target's NBD export of it
// before the memory migration starts, and the mirrors are ended after it completed, as
// libvirt's non-shared-storage migration does.

// MirrorDisk is one disk to copy to a migration target.
type MirrorDisk struct {
	ID string // an attached writable disk; also the target's export name
	// Shallow copies only the disk's top image (sync: top): for an overlay whose backing image
	// is identical on the target (a containerDisk overlay), so that only the overlay's data
	// travels. Otherwise the whole disk is copied (sync: full).
	Shallow bool
}

// MirrorOptions say where and how StartMirrors copies.
type MirrorOptions struct {
	// NBDSocket is the target's NBD server socket (ExportDisks' socket path).
	NBDSocket string
	Disks     []MirrorDisk
	// Background uses copy-mode background: guest writes are copied later, like the rest.
	// The default is write-blocking: once a mirror is ready, each guest write completes only
	// when it reached the target too, so the mirror converges whatever the guest does.
	Background bool
	// SpeedBytesPerSec limits each mirror's copy rate; 0 is unlimited.
	SpeedBytesPerSec int64
	// TLSCreds is a tls-creds-x509 client object (AddTLSCreds) the NBD connections use;
	// TLSHostname the name the target's certificate must carry. Empty: plaintext.
	TLSCreds, TLSHostname string
}

// MirrorProgress is the state of one disk's mirror (query-block-jobs).
type MirrorProgress struct {
	ID     string
	Status string // QEMU's job status ("running", "ready", ...); "none" once the job is gone
	Ready  bool   // source and target are in sync; guest writes go to both
	Copied int64  // bytes copied so far (offset)
	Total  int64  // bytes to copy (len; grows when the guest writes)
}

// StartMirrors connects to the target's NBD server and starts one mirror job per disk: a
// blockdev-add of an NBD client node for the disk's export, then blockdev-mirror from the
// disk's format node into it. If a step fails, the mirrors and nodes started so far are
// removed again. Follow it with WaitMirrorsReady, then Migrate; end the mirrors with
// StopMirrors (after the migration completed, or to abort it).
//
// QMP: blockdev-add {driver: nbd}, blockdev-mirror {sync: top|full, copy-mode} per disk.
func (vm *VM) StartMirrors(ctx context.Context, o MirrorOptions) error {
	if err := checkSocketPath("nbd socket", o.NBDSocket); err != nil {
		return fmt.Errorf("start mirrors: %w", err)
	}
	ids := make([]string, len(o.Disks))
	for i, d := range o.Disks {
		ids[i] = d.ID
	}
	if err := vm.checkMigrationDisks(ids); err != nil {
		return fmt.Errorf("start mirrors: %w", err)
	}
	if o.SpeedBytesPerSec < 0 {
		return fmt.Errorf("start mirrors: %w: negative speed", ErrInvalidSpec)
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	vm.mu.Lock()
	busy := len(vm.mirrors) > 0
	vm.mu.Unlock()
	if busy {
		return fmt.Errorf("start mirrors: %w: mirrors run already", ErrWrongState)
	}
	mode := pick(o.Background, "background", "write-blocking")
	for _, d := range o.Disks {
		if err := vm.startMirror(ctx, d, o.NBDSocket, mode, o.SpeedBytesPerSec, o.TLSCreds, o.TLSHostname); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), revertTimeout)
			if uerr := vm.stopMirrors(ctx); uerr != nil {
				vm.log.Warn("undo mirrors failed", "err", uerr)
			}
			cancel()
			return fmt.Errorf("start mirrors: disk %s: %w", d.ID, err)
		}
	}
	vm.log.Info("disk mirrors started", "disks", ids, "socket", o.NBDSocket, "copyMode", mode)
	return nil
}

// startMirror adds the NBD client node for d and starts its mirror; a failed mirror removes
// its node again. A started mirror is recorded for stopMirrors.
func (vm *VM) startMirror(ctx context.Context, d MirrorDisk, socket, mode string, speed int64, tlsCreds, tlsHost string) error {
	node := map[string]any{
		"driver": "nbd", "node-name": nbdClientNode(d.ID),
		"server": map[string]any{"type": "unix", "path": socket}, "export": d.ID,
	}
	if tlsCreds != "" {
		node["tls-creds"] = tlsCreds
		if tlsHost != "" {
			node["tls-hostname"] = tlsHost
		}
	}
	if err := vm.execute(ctx, "blockdev-add", node, nil); err != nil {
		return err
	}
	args := map[string]any{
		"job-id": mirrorJobID(d.ID), "device": formatNodeName(d.ID), "target": nbdClientNode(d.ID),
		"sync": pick(d.Shallow, "top", "full"), "copy-mode": mode,
	}
	if speed > 0 {
		args["speed"] = speed
	}
	if err := vm.execute(ctx, "blockdev-mirror", args, nil); err != nil {
		vm.undo("blockdev-del", map[string]any{"node-name": nbdClientNode(d.ID)})
		return err
	}
	vm.mu.Lock()
	vm.mirrors = append(vm.mirrors, d.ID)
	vm.mu.Unlock()
	return nil
}

// Mirrors returns the ids of the disks with a mirror started by StartMirrors and not yet
// stopped.
func (vm *VM) Mirrors() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.mirrors)
}

// blockJob is one entry of query-block-jobs.
type blockJob struct {
	Device string `json:"device"` // the job id
	Type   string `json:"type"`
	Status string `json:"status"`
	Ready  bool   `json:"ready"`
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Error  string `json:"error"`
}

func (j blockJob) ready() bool { return j.Ready || j.Status == "ready" }

// ended: a concluded job waits to be dismissed, a null one is gone.
func (j blockJob) ended() bool { return j.Status == "concluded" || j.Status == "null" }

// blockJobs reads query-block-jobs keyed by job id.
func (vm *VM) blockJobs(ctx context.Context) (map[string]blockJob, error) {
	var jobs []blockJob
	if err := vm.execute(ctx, "query-block-jobs", nil, &jobs); err != nil {
		return nil, err
	}
	m := make(map[string]blockJob, len(jobs))
	for _, j := range jobs {
		m[j.Device] = j
	}
	return m, nil
}

// MirrorStatus reports the progress of every mirror StartMirrors started, in its order.
// QMP: query-block-jobs.
func (vm *VM) MirrorStatus(ctx context.Context) ([]MirrorProgress, error) {
	jobs, err := vm.blockJobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("mirror status: %w", err)
	}
	ids := vm.Mirrors()
	out := make([]MirrorProgress, 0, len(ids))
	for _, id := range ids {
		p := MirrorProgress{ID: id, Status: "none"}
		if j, ok := jobs[mirrorJobID(id)]; ok {
			p = MirrorProgress{ID: id, Status: j.Status, Ready: j.ready(), Copied: j.Offset, Total: j.Len}
		}
		out = append(out, p)
	}
	return out, nil
}

// blockJobEvent is the data of the BLOCK_JOB_* events.
type blockJobEvent struct {
	Device string `json:"device"` // job id
	Error  string `json:"error"`  // BLOCK_JOB_COMPLETED of a failed job
	Action string `json:"action"` // BLOCK_JOB_ERROR
	Op     string `json:"operation"`
}

func isBlockJobEvent(e qmp.Event) bool {
	switch e.Name {
	case "BLOCK_JOB_READY", "BLOCK_JOB_COMPLETED", "BLOCK_JOB_CANCELLED", "BLOCK_JOB_ERROR":
		return true
	}
	return false
}

// diskOfJob maps a mirror job id back to its disk id among ids.
func diskOfJob(job string, ids []string) (string, bool) {
	for _, id := range ids {
		if mirrorJobID(id) == job {
			return id, true
		}
	}
	return "", false
}

// WaitMirrorsReady waits until every mirror is ready (source and target in sync), following
// the jobs' events. A mirror that reports an error or ends before it is ready returns a
// *MirrorError (the other mirrors keep running: StopMirrors ends them); QEMU's exit returns
// ErrExited. progress (optional) gets MirrorStatus after every event.
//
// QMP: events BLOCK_JOB_READY, BLOCK_JOB_ERROR, BLOCK_JOB_COMPLETED, BLOCK_JOB_CANCELLED;
// query-block-jobs.
func (vm *VM) WaitMirrorsReady(ctx context.Context, progress func([]MirrorProgress)) error {
	events, unsub := vm.mon.Subscribe(isBlockJobEvent)
	defer unsub()
	ids := vm.Mirrors()
	if len(ids) == 0 {
		return fmt.Errorf("wait for mirrors: %w: no mirrors", ErrWrongState)
	}
	for {
		// Subscribed first, then read: an event between the two is not lost.
		jobs, err := vm.blockJobs(ctx)
		if err != nil {
			return fmt.Errorf("wait for mirrors: %w", err)
		}
		ready := 0
		for _, id := range ids {
			j, ok := jobs[mirrorJobID(id)]
			switch {
			case !ok || j.ended():
				return fmt.Errorf("wait for mirrors: %w", &MirrorError{Disk: id, Event: "job ended before it was ready", Desc: j.Error})
			case j.ready():
				ready++
			}
		}
		if progress != nil {
			if p, err := vm.MirrorStatus(ctx); err == nil {
				progress(p)
			}
		}
		if ready == len(ids) {
			return nil
		}
		select {
		case e, ok := <-events:
			if !ok {
				return fmt.Errorf("wait for mirrors: %w", ErrExited)
			}
			if err := mirrorFailure(e, ids); err != nil {
				return fmt.Errorf("wait for mirrors: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("wait for mirrors: %w", ctx.Err())
		}
	}
}

// mirrorFailure is the *MirrorError an event before readiness means, nil for other events.
func mirrorFailure(e qmp.Event, ids []string) error {
	var d blockJobEvent
	if json.Unmarshal(e.Data, &d) != nil {
		return nil
	}
	id, ours := diskOfJob(d.Device, ids)
	if !ours {
		return nil
	}
	switch e.Name {
	case "BLOCK_JOB_ERROR":
		return &MirrorError{Disk: id, Event: e.Name, Desc: d.Op + " error, action " + d.Action}
	case "BLOCK_JOB_COMPLETED", "BLOCK_JOB_CANCELLED":
		return &MirrorError{Disk: id, Event: e.Name, Desc: d.Error}
	}
	return nil
}

// StopMirrors ends every mirror StartMirrors started and removes the NBD client nodes. A
// ready mirror ended this way leaves the target a consistent copy of the disk as of now (with
// the guest paused after a completed migration: the final state), which is how libvirt ends
// the mirrors of a non-shared-storage migration; a mirror still copying is abandoned (the
// abort case). The source's own disks are never written by a mirror. It returns once every
// job has ended and its node is gone; the target may run the guest only after that.
//
// QMP: block-job-cancel per job, events BLOCK_JOB_COMPLETED / BLOCK_JOB_CANCELLED,
// query-block-jobs, blockdev-del per NBD node.
func (vm *VM) StopMirrors(ctx context.Context) error {
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	return vm.stopMirrors(ctx)
}

func (vm *VM) stopMirrors(ctx context.Context) error {
	ids := vm.Mirrors()
	if len(ids) == 0 {
		return nil
	}
	events, unsub := vm.mon.Subscribe(isBlockJobEvent)
	defer unsub()
	for _, id := range ids {
		err := vm.execute(ctx, "block-job-cancel", map[string]any{"device": mirrorJobID(id)}, nil)
		if err != nil && !isQMPClass(err, "DeviceNotActive") { // a failed job is gone already
			return fmt.Errorf("stop mirrors: disk %s: %w", id, err)
		}
	}
	for {
		jobs, err := vm.blockJobs(ctx)
		if err != nil {
			return fmt.Errorf("stop mirrors: %w", err)
		}
		running := slices.ContainsFunc(ids, func(id string) bool {
			j, ok := jobs[mirrorJobID(id)]
			return ok && !j.ended()
		})
		if !running {
			break
		}
		select {
		case _, ok := <-events:
			if !ok {
				return fmt.Errorf("stop mirrors: %w", ErrExited)
			}
		case <-ctx.Done():
			return fmt.Errorf("stop mirrors: %w", ctx.Err())
		}
	}
	var errs []error
	for _, id := range ids {
		if err := vm.execute(ctx, "blockdev-del", map[string]any{"node-name": nbdClientNode(id)}, nil); err != nil {
			errs = append(errs, fmt.Errorf("disk %s: %w", id, err))
			continue
		}
		vm.mu.Lock()
		vm.mirrors = slices.DeleteFunc(vm.mirrors, func(m string) bool { return m == id })
		vm.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop mirrors: %w", err)
	}
	vm.log.Info("disk mirrors stopped", "disks", ids)
	return nil
}

// isQMPClass reports whether err carries a QMP error of class.
func isQMPClass(err error, class string) bool {
	var qe *qmp.Error
	return errors.As(err, &qe) && qe.Class == class
}
