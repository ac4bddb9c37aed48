package launcher_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// nobody is the unprivileged user of Debian (and most distributions).
const nobody = 65534

// TestUnprivilegedLauncher: a launcher running as nobody, with its run dir and boot files
// owned by nobody and no NIC, runs the guest under TCG; QEMU runs as nobody too.
func TestUnprivilegedLauncher(t *testing.T) {
	prereq.Root(t) // to hand the files to nobody
	runDir, err := os.MkdirTemp("", "vl-")
	if err != nil {
		t.Fatal(err)
	}
	files := testguest.Assets(t)
	spec := guestSpec(t, "nobody")
	spec.Boot.Kernel = copyFile(t, files.Kernel, filepath.Join(runDir, "vmlinuz"))
	spec.Boot.Initrd = copyFile(t, files.Initrd, filepath.Join(runDir, "initrd"))
	if err := os.Chown(runDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	p := startLauncher(t, launchOpts{uid: nobody, runDir: runDir})
	_, con := syncGuest(t, p, spec)
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	for name, pid := range map[string]int{"launcher": p.cmd.Process.Pid, "qemu": p.qemu} {
		if uid := procUID(t, pid); uid != nobody {
			t.Errorf("%s runs as uid %d, want %d", name, uid, nobody)
		}
	}
	if err := p.client.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if code, err := p.wait(ctx); err != nil || code != launcher.ExitForced {
		t.Errorf("exit %d %v", code, err)
	}
	p.assertClean(t)
}

func copyFile(t *testing.T, from, to string) string {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Chown(nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return to
}

// procUID reads the real uid of pid from /proc/<pid>/status.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatalf("no Uid line for pid %d", pid)
	return -1
}
