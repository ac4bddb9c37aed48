package qemu

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

// TestStartFailures: whatever step fails, Start reports it by name, leaves no QEMU process and
// no socket behind, and a QEMU that dies early is noticed at once, not at the deadline.
func TestStartFailures(t *testing.T) {
	bin := prereq.QEMU(t)
	prereq.Root(t)
	empty := filepath.Join(t.TempDir(), "empty.qcow2")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		mutate   func(*testing.T, *Spec)
		step     string
		wantErr  error
		inStderr string
	}{
		{"invalid spec", func(_ *testing.T, s *Spec) { s.Name = "bad,name" }, "validate", ErrInvalidSpec, ""},
		{"socket path taken", func(t *testing.T, s *Spec) {
			l, err := net.Listen("unix", s.Agent.Socket)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}, "prepare-files", os.ErrExist, ""},
		{"qemu refuses argv", func(_ *testing.T, s *Spec) { s.Machine = "pc-q35-1.0" }, "connect-qmp", ErrExited, "machine"},
		{"disk attach fails", func(_ *testing.T, s *Spec) {
			s.Disks = []Disk{{ID: "bad", Path: empty, Format: FormatQCOW2}}
		}, "attach-devices", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortTempDir(t, "vs")
			spec := guestSpec(t, guestOpts{dir: dir})
			spec.Name = "startfail-" + strings.ReplaceAll(tt.name, " ", "-")
			tt.mutate(t, spec)
			ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
			defer cancel()
			start := time.Now()
			vm, err := Start(ctx, spec, StartOptions{Binary: bin, Accel: &tcg, QMPSocket: filepath.Join(dir, "qmp.sock")})
			if err == nil {
				_ = vm.Kill(ctx) // best-effort cleanup before failing
				t.Fatal("Start succeeded")
			}
			var se *StepError
			if !errors.As(err, &se) || se.Step != tt.step {
				t.Fatalf("Start error = %v, want a StepError in step %s", err, tt.step)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Start error = %v, want %v", err, tt.wantErr)
			}
			if tt.inStderr != "" && !strings.Contains(se.Stderr, tt.inStderr) {
				t.Fatalf("stderr tail %q lacks %q", se.Stderr, tt.inStderr)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("Start took %s to fail", took)
			}
			if pids := processesNamed(t, "guest="+spec.Name+","); len(pids) > 0 {
				t.Errorf("qemu processes left behind: %v", pids)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Type() == os.ModeSocket && e.Name() != "qga.sock" { // qga.sock: the test's own listener
					t.Errorf("socket %s left behind", e.Name())
				}
			}
		})
	}
}

// processesNamed returns the pids whose command line contains s.
func processesNamed(t testing.TB, s string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
