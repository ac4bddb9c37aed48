package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// recordFile in the state folder lists the control-plane processes a running `vmlet local`
// started, so that the next start can stop them if that instance died without doing so.
const recordFile = "controlplane.json"

// LeftoverGrace is how long a leftover control-plane process gets after SIGTERM.
const LeftoverGrace = 15 * time.Second

// ProcessRecord is one control-plane process as StateDir/controlplane.json records it; the pid
// with its start time names one process for good (a pid alone is reused).
type ProcessRecord struct {
	Name      string `json:"name"`
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // /proc/PID/stat field 22
	Exe       string `json:"exe"`
}

// recordOf describes running process pid.
func recordOf(name string, pid int) (ProcessRecord, error) {
	st, err := readStat(pid)
	if err != nil {
		return ProcessRecord{}, err
	}
	exe, err := exeOf(pid)
	if err != nil {
		return ProcessRecord{}, err
	}
	return ProcessRecord{Name: name, Pid: pid, StartTime: st.StartTime, Exe: exe}, nil
}

// running reports whether the recorded process still runs: same pid, same start time, same
// executable, not a zombie. Anything else is another process (or none) and is never touched.
func (r ProcessRecord) running() bool {
	st, err := readStat(r.Pid)
	if err != nil || st.StartTime != r.StartTime || st.State == 'Z' {
		return false
	}
	exe, err := exeOf(r.Pid)
	return err == nil && exe == r.Exe
}

func writeRecords(stateDir string, rs []ProcessRecord) error {
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode process records: %w", err)
	}
	p := filepath.Join(stateDir, recordFile)
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write process records: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("write process records: %w", err)
	}
	return nil
}

func readRecords(stateDir string) ([]ProcessRecord, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read process records: %w", err)
	}
	var rs []ProcessRecord
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("decode process records %s: %w", filepath.Join(stateDir, recordFile), err)
	}
	return rs, nil
}

func removeRecords(stateDir string) error {
	if err := os.Remove(filepath.Join(stateDir, recordFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove process records: %w", err)
	}
	return nil
}

// reclaimLeftovers stops the control-plane processes a previous `vmlet local` on this state
// folder recorded and left running (it was killed, or an older build had no parent-death
// signal on them): each is checked to be the recorded process (start time, executable), then
// stopped (SIGTERM, grace, SIGKILL). It returns those it stopped. Call with the state folder
// locked.
func reclaimLeftovers(ctx context.Context, stateDir string, grace time.Duration) ([]ProcessRecord, error) {
	rs, err := readRecords(stateDir)
	if err != nil {
		return nil, err
	}
	var stopped []ProcessRecord
	var errs []error
	for _, r := range rs {
		if !r.running() {
			continue
		}
		if err := terminate(ctx, r.Pid, grace); err != nil {
			errs = append(errs, fmt.Errorf("stop leftover %s (pid %d): %w", r.Name, r.Pid, err))
			continue
		}
		stopped = append(stopped, r)
	}
	if len(errs) > 0 {
		return stopped, errors.Join(errs...)
	}
	return stopped, removeRecords(stateDir)
}
