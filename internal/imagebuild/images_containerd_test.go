package imagebuild

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestImages builds the three images (hack/images.sh), rebuilds them from scratch and asserts
// the same digests and archive bytes, imports them into a private containerd (its own root,
// state and socket in a temp folder: never the host's) with `ctr -n k8s.io images import`,
// checks containerd reports the digests images.txt prints, and runs them with `ctr run`:
// QEMU from the launcher image (qemu-system-x86_64 -version, then a QEMU left running to see
// it is the launcher's uid 107), qemu-img and `vmlet --help` from the vmlet image, and the pause
// image as a sandbox would (uid 65535, exits 0 on SIGTERM). Afterwards containerd and all it
// started must be gone: no process, no mount under its folder, no cgroup, no shim socket.
func TestImages(t *testing.T) {
	prereq.Root(t)
	for _, tool := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(tool); err != nil {
			prereq.Missing(t, tool+" not on PATH (apt: containerd, runc; make deps)")
		}
	}
	dir := builtImages(t)
	want := readImagesTxt(t, dir)
	for _, ref := range []string{PauseRef, VmletRef, LauncherRef} {
		l := want[ref]
		t.Logf("%s %s: %.1f MB compressed, %.1f MB uncompressed", ref, l.Digest, float64(l.Compressed)/1e6, float64(l.Uncompressed)/1e6)
	}

	// Reproducible: a full rebuild into another folder gives the same bytes.
	again := t.TempDir()
	start := time.Now()
	if _, err := runImagesScript("--out", again); err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuild from scratch (binaries, unpacked packages, archives): %s", time.Since(start).Round(100*time.Millisecond))
	got := readImagesTxt(t, again)
	for ref, w := range want {
		if got[ref] != w {
			t.Errorf("rebuild of %s: %+v, first build %+v", ref, got[ref], w)
		}
		a, errA := os.ReadFile(filepath.Join(dir, w.File))
		b, errB := os.ReadFile(filepath.Join(again, w.File))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("rebuild of %s: archive %s differs (%v, %v)", ref, w.File, errA, errB)
		}
	}

	cdir := shortDir(t, "vct")
	c := startContainerd(t, cdir)
	for _, ref := range []string{PauseRef, VmletRef, LauncherRef} {
		if _, err := c.ctr("images", "import", filepath.Join(dir, want[ref].File)); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.ctr("images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for ref, w := range want {
		if !hasLine(ls, ref, w.Digest) {
			t.Errorf("containerd lists %s without digest %s:\n%s", ref, w.Digest, ls)
		}
	}

	id := func(s string) string { return "vmlet-it-" + s }
	run := func(image, name string, cmd ...string) string {
		t.Helper()
		out, err := c.ctr(append(append(append([]string{"run", "--rm"}, c.runArgs(id(name))...), image, id(name)), cmd...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := run(LauncherRef, "qemu-version", "qemu-system-x86_64", "-version"); !strings.Contains(out, "QEMU emulator version") {
		t.Errorf("qemu-system-x86_64 -version in the launcher image printed %q", out)
	} else {
		t.Logf("launcher image: %s", strings.SplitN(out, "\n", 2)[0])
	}
	if out := run(LauncherRef, "launcher-qemu-img", "qemu-img", "--version"); !strings.Contains(out, "qemu-img version") {
		t.Errorf("qemu-img --version in the launcher image printed %q", out)
	}
	if out := run(VmletRef, "vmlet-help", "vmlet", "--help"); !strings.Contains(out, "vmlet") || !strings.Contains(strings.ToLower(out), "usage") {
		t.Errorf("vmlet --help in the vmlet image printed %q", out)
	}
	if out := run(VmletRef, "vmlet-qemu-img", "qemu-img", "--version"); !strings.Contains(out, "qemu-img version") {
		t.Errorf("qemu-img --version in the vmlet image printed %q", out)
	}

	// QEMU kept running in the launcher image: it must be the launcher's non-root user.
	qid := id("qemu-running")
	if _, err := c.ctr(append(append([]string{"run", "-d"}, c.runArgs(qid)...), LauncherRef, qid,
		"qemu-system-x86_64", "-machine", "none", "-display", "none", "-nodefaults", "-S", "-monitor", "none")...); err != nil {
		t.Fatal(err)
	}
	qpid := c.taskPID(t, qid)
	if uid := processUID(t, qpid); uid != "107" {
		t.Errorf("QEMU in the launcher image runs as uid %s, want 107", uid)
	}
	if _, err := c.ctr("task", "kill", "-s", "SIGKILL", qid); err != nil {
		t.Fatal(err)
	}
	c.waitStopped(t, qid)
	if _, err := c.ctr("task", "delete", qid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ctr("containers", "delete", qid); err != nil {
		t.Fatal(err)
	}

	// The pause image as a pod sandbox: runs as 65535, exits 0 on SIGTERM. Detached, as the
	// QEMU one: no ctr client has to stay attached (and within its deadline) for the whole check.
	pid := id("pause")
	if _, err := c.ctr(append(append([]string{"run", "-d"}, c.runArgs(pid)...), PauseRef, pid)...); err != nil {
		t.Fatal(err)
	}
	ppid := c.taskPID(t, pid)
	if uid := processUID(t, ppid); uid != "65535" {
		t.Errorf("pause runs as uid %s, want 65535", uid)
	}
	var shimSockets []string
	for _, shim := range processesMentioning(c.address) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(shim) + "/comm"); strings.HasPrefix(string(b), "containerd-shim") {
			shimSockets = append(shimSockets, unixSockets(t, shim)...)
		}
	}
	if len(shimSockets) == 0 {
		t.Errorf("found no socket of the pause container's shim")
	}
	if _, err := c.ctr("task", "kill", "-s", "SIGTERM", pid); err != nil {
		t.Fatal(err)
	}
	c.waitStopped(t, pid)
	// ctr task delete exits with the task's exit status.
	if _, err := c.ctr("task", "delete", pid); err != nil {
		t.Errorf("pause on SIGTERM: %v, want exit 0", err)
	}
	if _, err := c.ctr("containers", "delete", pid); err != nil {
		t.Fatal(err)
	}

	if out, err := c.ctr("containers", "ls", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("containers left after the runs: %q (%v)", out, err)
	}
	c.stop()

	// Nothing left behind.
	poll.Until(t, time.Minute, "no process of the private containerd", func() (bool, string) {
		pids := processesMentioning(cdir)
		return len(pids) == 0, strconv.Itoa(len(pids)) + " processes mention " + cdir
	})
	if m := mountsUnder(t, cdir); len(m) > 0 {
		t.Errorf("mounts left under %s: %v", cdir, m)
	}
	for _, s := range shimSockets {
		if _, err := os.Lstat(s); err == nil {
			t.Errorf("shim socket %s left behind", s)
		}
	}
	for _, m := range cgroupMounts(t) {
		g := filepath.Join(m, c.cgroupParent)
		ents, err := os.ReadDir(g)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("cgroup %s left behind", filepath.Join(g, e.Name()))
			}
		}
		// The parent is ours (runc makes it and leaves it): it must be empty, so removable.
		if err := os.Remove(g); err != nil {
			t.Errorf("remove cgroup %s: %v", g, err)
		}
	}
}

// hasLine reports whether some line of s contains all of words.
func hasLine(s string, words ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return true
		}
	}
	return false
}

// taskPID waits until task id runs and returns its host pid (ctr task ls).
func (c *privateContainerd) taskPID(t *testing.T, id string) int {
	t.Helper()
	var pid int
	poll.Until(t, time.Minute, "task "+id+" running", func() (bool, string) {
		out, _ := c.ctr("task", "ls")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == id && f[2] == "RUNNING" {
				pid, _ = strconv.Atoi(f[1])
				return pid > 0, l
			}
		}
		return false, out
	})
	return pid
}

// waitStopped waits until task id has stopped.
func (c *privateContainerd) waitStopped(t *testing.T, id string) {
	t.Helper()
	poll.Until(t, time.Minute, "task "+id+" stopped", func() (bool, string) {
		out, _ := c.ctr("task", "ls")
		return hasLine(out, id, "STOPPED"), out
	})
}

// processUID is the real uid of pid (/proc/PID/status).
func processUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return ""
}
