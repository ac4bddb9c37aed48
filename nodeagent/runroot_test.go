package nodeagent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestProcessRuntimeRunRootSearchable: a run root below a folder the launchers' user cannot
// pass (an existing one left 0700) is refused when the runtime is made, naming the folder,
// instead of every launcher start failing later; a searchable one is taken.
func TestProcessRuntimeRunRootSearchable(t *testing.T) {
	prereq.Root(t)
	mnt, err := devices.FindCgroup2Mount()
	if err != nil {
		prereq.Missing(t, "cgroup2: "+err.Error())
	}
	cg := "vmlet-test-runroot-" + filepath.Base(t.TempDir())
	t.Cleanup(func() { _ = os.Remove(filepath.Join(mnt, cg)) })
	u := process.User{UID: 107, GID: 107}
	top, err := os.MkdirTemp("", "vmlet-runroot-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(top, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = ProcessRuntime(ProcessOptions{RunRoot: filepath.Join(closed, "node-1"), CgroupParent: cg, User: u})
	if !errors.Is(err, ErrBadFlag) || !strings.Contains(err.Error(), closed) {
		t.Errorf("run root below a 0700 folder: %v, want ErrBadFlag naming %s", err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if _, err := ProcessRuntime(ProcessOptions{RunRoot: filepath.Join(closed, "node-1"), CgroupParent: cg, User: u}); err != nil {
		t.Errorf("searchable run root: %v", err)
	}
}
