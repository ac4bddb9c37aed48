package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// balloonPath is the balloon device's QOM path (qom-get/qom-set).
const balloonPath = "/machine/peripheral/" + devBalloon

// setBalloonStatsPeriod sets the balloon's guest statistics polling interval from the spec
// (nothing without a balloon or with a zero period).
//
// QMP: {"execute": "qom-set", "arguments": {"path": "/machine/peripheral/balloon_0",
// "property": "guest-stats-polling-interval", "value": N}}.
func (vm *VM) setBalloonStatsPeriod(ctx context.Context) error {
	b := vm.spec.Balloon
	if b == nil || b.StatsPeriodSeconds <= 0 {
		return nil
	}
	args := map[string]any{"path": balloonPath, "property": "guest-stats-polling-interval", "value": b.StatsPeriodSeconds}
	if err := vm.mon.Execute(ctx, "qom-set", args, nil); err != nil {
		return fmt.Errorf("set balloon stats period: %w", err)
	}
	return nil
}

// BalloonInfo is the balloon's view of guest memory. Guest statistics are those the guest
// driver reported last; a statistic the guest did not report is nil.
type BalloonInfo struct {
	// ActualBytes is the guest's memory as the balloon leaves it (query-balloon "actual").
	ActualBytes uint64
	// StatsUpdated is when the guest last reported statistics; zero before its first report.
	StatsUpdated                   time.Time
	SwapIn, SwapOut                *uint64 // bytes swapped in/out (stat-swap-in/-out)
	MajorFaults, MinorFaults       *uint64 // stat-major-faults, stat-minor-faults
	Free, Total, Available, Caches *uint64 // bytes: stat-free-memory, -total-, -available-, stat-disk-caches
}

// ErrNoBalloon is Balloon's error for a VM without a balloon device.
var ErrNoBalloon = errors.New("no balloon device")

// Balloon returns the balloon's figures, or ErrNoBalloon.
//
// QMP: query-balloon; qom-get /machine/peripheral/balloon_0 guest-stats.
func (vm *VM) Balloon(ctx context.Context) (BalloonInfo, error) {
	if vm.spec.Balloon == nil {
		return BalloonInfo{}, ErrNoBalloon
	}
	var q struct {
		Actual uint64 `json:"actual"`
	}
	if err := vm.mon.Execute(ctx, "query-balloon", nil, &q); err != nil {
		return BalloonInfo{}, fmt.Errorf("balloon: %w", err)
	}
	var raw json.RawMessage
	if err := vm.mon.Execute(ctx, "qom-get", map[string]any{"path": balloonPath, "property": "guest-stats"}, &raw); err != nil {
		return BalloonInfo{}, fmt.Errorf("balloon guest stats: %w", err)
	}
	info, err := ParseGuestStats(raw)
	if err != nil {
		return BalloonInfo{}, err
	}
	info.ActualBytes = q.Actual
	return info, nil
}

// ParseGuestStats parses the balloon's guest-stats property:
//
//	{"stats": {"stat-free-memory": 123, "stat-swap-in": -1, ...}, "last-update": 1700000000}
//
// QEMU keeps a statistic the guest never reported at (uint64)-1, which it prints as -1 or
// as 18446744073709551615 depending on the version: both give nil. last-update 0 (no report
// yet) gives a zero StatsUpdated.
func ParseGuestStats(b []byte) (BalloonInfo, error) {
	var raw struct {
		Stats      map[string]json.Number `json:"stats"`
		LastUpdate int64                  `json:"last-update"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return BalloonInfo{}, fmt.Errorf("parse guest stats: %w", err)
	}
	var info BalloonInfo
	if raw.LastUpdate > 0 {
		info.StatsUpdated = time.Unix(raw.LastUpdate, 0)
	}
	for name, dst := range map[string]**uint64{
		"stat-swap-in": &info.SwapIn, "stat-swap-out": &info.SwapOut,
		"stat-major-faults": &info.MajorFaults, "stat-minor-faults": &info.MinorFaults,
		"stat-free-memory": &info.Free, "stat-total-memory": &info.Total,
		"stat-available-memory": &info.Available, "stat-disk-caches": &info.Caches,
	} {
		n, ok := raw.Stats[name]
		if !ok || n == "-1" {
			continue
		}
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return BalloonInfo{}, fmt.Errorf("parse guest stats %s %q: %w", name, n, err)
		}
		if v == math.MaxUint64 {
			continue
		}
		*dst = &v
	}
	return info, nil
}
