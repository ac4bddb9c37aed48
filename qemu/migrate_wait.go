package qemu

import (
	"context"
	"fmt"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// MigrationInfo is QEMU's view of a migration (query-migrate).
type MigrationInfo struct {
	// Status: "none", "setup", "active", "postcopy-active", "device", "completed", "failed",
	// "cancelling", "cancelled", ...
	Status           string
	TotalTime        time.Duration // source, once completed
	Downtime         time.Duration // source, once completed: guest paused at switchover
	ExpectedDowntime time.Duration // source, while active
	SetupTime        time.Duration
	RAMTransferred   int64 // bytes
	RAMRemaining     int64
	RAMTotal         int64
	DirtyPagesRate   int64   // pages per second
	Mbps             float64 // throughput of the last pass
	DirtySyncCount   int64   // passes over guest memory
	PostcopyRequests int64   // pages the target faulted in (postcopy)
	// CPUThrottlePercentage is how much auto-converge throttles the guest now.
	CPUThrottlePercentage int
	ErrorDesc             string
	// SocketAddresses are the target's listening addresses ("127.0.0.1:4444").
	SocketAddresses []string
}

// Final reports whether the status is terminal (completed, failed or cancelled).
func (m MigrationInfo) Final() bool {
	return m.Status == "completed" || m.Status == "failed" || m.Status == "cancelled"
}

type rawMigrationInfo struct {
	Status           string `json:"status"`
	TotalTime        int64  `json:"total-time"`
	Downtime         int64  `json:"downtime"`
	ExpectedDowntime int64  `json:"expected-downtime"`
	SetupTime        int64  `json:"setup-time"`
	RAM              struct {
		Transferred      int64   `json:"transferred"`
		Remaining        int64   `json:"remaining"`
		Total            int64   `json:"total"`
		DirtyPagesRate   int64   `json:"dirty-pages-rate"`
		Mbps             float64 `json:"mbps"`
		DirtySyncCount   int64   `json:"dirty-sync-count"`
		PostcopyRequests int64   `json:"postcopy-requests"`
	} `json:"ram"`
	CPUThrottlePercentage int    `json:"cpu-throttle-percentage"`
	ErrorDesc             string `json:"error-desc"`
	SocketAddress         []struct {
		Type string `json:"type"`
		Host string `json:"host"`
		Port string `json:"port"`
		Path string `json:"path"`
	} `json:"socket-address"`
}

func (r rawMigrationInfo) info() MigrationInfo {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	m := MigrationInfo{
		Status: r.Status, TotalTime: ms(r.TotalTime), Downtime: ms(r.Downtime),
		ExpectedDowntime: ms(r.ExpectedDowntime), SetupTime: ms(r.SetupTime),
		RAMTransferred: r.RAM.Transferred, RAMRemaining: r.RAM.Remaining, RAMTotal: r.RAM.Total,
		DirtyPagesRate: r.RAM.DirtyPagesRate, Mbps: r.RAM.Mbps, DirtySyncCount: r.RAM.DirtySyncCount,
		PostcopyRequests: r.RAM.PostcopyRequests, CPUThrottlePercentage: r.CPUThrottlePercentage,
		ErrorDesc: r.ErrorDesc,
	}
	for _, a := range r.SocketAddress {
		switch a.Type {
		case "inet":
			m.SocketAddresses = append(m.SocketAddresses, a.Host+":"+a.Port)
		case "unix":
			m.SocketAddresses = append(m.SocketAddresses, a.Path)
		}
	}
	if m.Status == "" {
		m.Status = "none"
	}
	return m
}

// MigrationStatus reads the migration state. QMP: query-migrate.
func (vm *VM) MigrationStatus(ctx context.Context) (MigrationInfo, error) {
	var r rawMigrationInfo
	if err := vm.execute(ctx, "query-migrate", nil, &r); err != nil {
		return MigrationInfo{}, err
	}
	return r.info(), nil
}

func isMigrationEvent(e qmp.Event) bool { return e.Name == "MIGRATION" || e.Name == "MIGRATION_PASS" }

// WaitMigration follows the outgoing migration until it ends and returns the final
// MigrationInfo; progress (optional) gets a fresh query-migrate after every MIGRATION and
// MIGRATION_PASS event. "completed" returns nil error with TotalTime and Downtime filled in
// (QEMU marks the migration completed slightly before it stores them: WaitMigration re-reads
// until they are there); "failed" and "cancelled" return a *MigrationError.
//
// QMP: events MIGRATION, MIGRATION_PASS; query-migrate.
func (vm *VM) WaitMigration(ctx context.Context, progress func(MigrationInfo)) (MigrationInfo, error) {
	events, unsub := vm.mon.Subscribe(isMigrationEvent)
	defer unsub()
	for {
		// Subscribed first, then read: an event between the two is not lost.
		m, err := vm.MigrationStatus(ctx)
		if err != nil {
			return m, fmt.Errorf("wait for migration: %w", err)
		}
		if progress != nil {
			progress(m)
		}
		switch m.Status {
		case "completed":
			return vm.completedStats(ctx, m)
		case "failed", "cancelled":
			return m, &MigrationError{Status: m.Status, Desc: m.ErrorDesc}
		case "none":
			return m, fmt.Errorf("wait for migration: %w: no migration", ErrWrongState)
		}
		if err := vm.nextEvent(ctx, events); err != nil {
			return m, fmt.Errorf("wait for migration: %w", err)
		}
	}
}

// statsPoll is the query-migrate interval while waiting for the completion stats, and
// statsWait the longest wait for them (QEMU fills them within ≈100 ms).
const (
	statsPoll = 5 * time.Millisecond
	statsWait = 5 * time.Second
)

// completedStats re-reads query-migrate until total-time is set: no event announces it.
func (vm *VM) completedStats(ctx context.Context, m MigrationInfo) (MigrationInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, statsWait)
	defer cancel()
	t := time.NewTicker(statsPoll)
	defer t.Stop()
	for m.TotalTime == 0 {
		select {
		case <-ctx.Done():
			return m, fmt.Errorf("wait for migration stats: %w", ctx.Err())
		case <-t.C:
		}
		var err error
		if m, err = vm.MigrationStatus(ctx); err != nil {
			return m, fmt.Errorf("wait for migration stats: %w", err)
		}
	}
	return m, nil
}

// WaitIncoming follows an incoming migration on the target until it completes. With resume,
// it resumes the guest on the target as soon as that is safe: when post-copy starts (the
// source has stopped and released its disks) or when the migration completes. Pass resume
// when the guest was running on the source. A failed migration returns a *MigrationError (the
// target QEMU then usually exits by itself).
//
// QMP: event MIGRATION; query-migrate; cont; qom-set guest-stats-polling-interval.
func (vm *VM) WaitIncoming(ctx context.Context, resume bool) (MigrationInfo, error) {
	events, unsub := vm.mon.Subscribe(isMigrationEvent)
	defer unsub()
	resumed := false
	for {
		m, err := vm.MigrationStatus(ctx)
		if err != nil {
			return m, fmt.Errorf("wait for incoming migration: %w", err)
		}
		switch m.Status {
		case "postcopy-active", "completed":
			if resume && !resumed {
				if err := vm.Resume(ctx); err != nil {
					return m, fmt.Errorf("resume migrated guest: %w", err)
				}
				resumed = true
			}
			if m.Status == "completed" {
				// The device state arrived: make sure the balloon polls on this side.
				if err := vm.setBalloonStatsPeriod(ctx); err != nil {
					vm.log.Warn("balloon stats after incoming migration", "err", err)
				}
				return m, nil
			}
		case "failed", "cancelled":
			return m, &MigrationError{Status: m.Status, Desc: m.ErrorDesc}
		}
		if err := vm.nextEvent(ctx, events); err != nil {
			return m, fmt.Errorf("wait for incoming migration: %w", err)
		}
	}
}

// nextEvent waits for the next event on ch, QEMU's exit or ctx.
func (vm *VM) nextEvent(ctx context.Context, ch <-chan qmp.Event) error {
	select {
	case _, ok := <-ch:
		if !ok {
			return ErrExited
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
