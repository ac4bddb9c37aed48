package leakaudit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
)

func TestReportString(t *testing.T) {
	r := Report{Left: map[string][]string{Taps: {"tap0 (index 4)"}, Files: {"/a", "/b"}}}
	want := "processes 0, cgroups 0, netns 0, links 0, taps 1, nft tables 0, bpf programs 0, mounts 0, files 2"
	if r.String() != want || r.Total() != 3 {
		t.Fatalf("String() = %q (total %d), want %q", r.String(), r.Total(), want)
	}
	if d := r.Detail(); !strings.Contains(d, "taps left: tap0 (index 4)") || !strings.Contains(d, "files left: /a, /b") {
		t.Errorf("Detail() = %q", d)
	}
	if (Report{}).Err() != nil || r.Err() == nil {
		t.Error("Err: nil exactly when nothing is left")
	}
}

// TestFilesAndProcesses: a file and a process made after the snapshot are found, and gone
// again once removed; what was there before never counts.
func TestFilesAndProcesses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "before"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "marker")
	snap, err := Take(Scope{Dirs: []string{dir}, Processes: []string{marker}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "new", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A shell waiting in its builtin read: one process with the marker (no child that, between
	// fork and exec, would carry the marker too).
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cmd := exec.Command("sh", "-c", "read x", marker)
	cmd.Stdin = pr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = pr.Close()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Start returns once the child began its exec, which sets the new command line a moment
	// later (/proc/PID/cmdline reads empty until then; seen under load in CI).
	poll.Until(t, 10*time.Second, "the shell's command line", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cmdline"))
		return strings.Contains(string(b), marker), fmt.Sprintf("%q", b)
	})
	rep, err := snap.Diff()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Count(Files) != 2 || rep.Count(Processes) != 1 || rep.Total() != 3 {
		t.Fatalf("after: %s\n%s", rep, rep.Detail())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := os.RemoveAll(filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	if rep := snap.Settle(5 * time.Second); rep.Total() != 0 {
		t.Fatalf("after cleanup: %s\n%s", rep, rep.Detail())
	}
}
