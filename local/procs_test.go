package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
)

func TestParseStat(t *testing.T) {
	tail := " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 123456 19 20"
	for _, tc := range []struct {
		in   string
		want procStat
	}{
		{"42 (etcd) S 7" + tail, procStat{State: 'S', PPid: 7, StartTime: 123456}},
		{"42 (a) b (c)) Z 1" + tail, procStat{State: 'Z', PPid: 1, StartTime: 123456}},
	} {
		got, err := parseStat(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "42 etcd S 1", "42 (etcd) S x" + tail, "42 (etcd) S 1 2"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

// TestReclaimOnlyRecorded: a recorded process that still runs is stopped (and one that ignores
// SIGTERM is killed); a record whose start time or executable does not match the process with
// that pid (a reused pid) leaves the process alone.
func TestReclaimOnlyRecorded(t *testing.T) {
	dir := t.TempDir()
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		go func() { _ = cmd.Wait() }()
		return cmd
	}
	polite := start("exec sleep 600")
	stubborn := start("trap '' TERM; exec sleep 600") // an ignored signal stays ignored across exec
	other := start("exec sleep 601")
	var rs []ProcessRecord
	for i, c := range []*exec.Cmd{polite, stubborn, other} {
		poll.Until(t, 10*time.Second, "sleep running", func() (bool, string) {
			exe, err := exeOf(c.Process.Pid)
			return err == nil && filepath.Base(exe) == "sleep", exe
		})
		r, err := recordOf("p", c.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			r.StartTime++ // another process once had this pid
		}
		rs = append(rs, r)
	}
	exeMismatch := rs[0]
	exeMismatch.Pid, exeMismatch.StartTime = os.Getpid(), 0
	if self, err := recordOf("self", os.Getpid()); err == nil {
		exeMismatch.StartTime, exeMismatch.Exe = self.StartTime, "/not/this/binary"
	}
	rs = append(rs, exeMismatch)
	if err := writeRecords(dir, rs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopped, err := reclaimLeftovers(ctx, dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped) != 2 || stopped[0].Pid != polite.Process.Pid || stopped[1].Pid != stubborn.Process.Pid {
		t.Errorf("stopped %+v, want the polite and the stubborn one", stopped)
	}
	for _, c := range []*exec.Cmd{polite, stubborn} {
		if poll.Alive(c.Process.Pid) {
			t.Errorf("recorded process %d still runs", c.Process.Pid)
		}
	}
	if !poll.Alive(other.Process.Pid) {
		t.Errorf("process %d whose start time did not match the record was stopped", other.Process.Pid)
	}
	if _, err := os.Stat(filepath.Join(dir, recordFile)); !os.IsNotExist(err) {
		t.Errorf("record left after reclaim: %v", err)
	}
}
