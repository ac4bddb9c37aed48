package devices

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/test/prereq"
	"golang.org/x/sys/unix"
)

func TestFindCgroup2MountThisHost(t *testing.T) {
	p, err := FindCgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatalf("%s has filesystem magic %#x, want cgroup2", p, st.Type)
	}
}

// TestRemoveCgroupKillsSubtree: a process in a nested child cgroup is killed, both directories
// are removed, and the wait ended on cgroup.events, not a timer.
func TestRemoveCgroupKillsSubtree(t *testing.T) {
	prereq.Root(t)
	outer, err := NewCgroup("", fmt.Sprintf("vmlet-devtest-%d-kill", os.Getpid()))
	must(t, err)
	t.Cleanup(func() { _ = RemoveCgroup(context.Background(), outer.Path) })
	inner, err := NewCgroup(outer.Path, "inner")
	must(t, err)
	if _, err := NewCgroup(outer.Path, "inner"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("NewCgroup on an existing cgroup = %v, want fs.ErrExist", err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=serve")
	stdin, err := cmd.StdinPipe() // serve blocks reading it until killed
	must(t, err)
	defer stdin.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, inner.Start(cmd))
	procs, err := inner.Procs()
	must(t, err)
	if !slices.Contains(procs, cmd.Process.Pid) {
		t.Fatalf("child %d not in %s: %v", cmd.Process.Pid, inner.Path, procs)
	}
	if busy, err := outer.Populated(); err != nil || !busy {
		t.Fatalf("outer Populated() = %v, %v; want true", busy, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	must(t, outer.Remove(ctx))
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	for _, p := range []string{inner.Path, outer.Path} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists: %v", p, err)
		}
	}
	must(t, outer.Remove(ctx)) // removing again is a no-op
}

// TestJailCleanupLeavesNothing: a jail with a running process and grants is closed; the
// cgroup directory, the program and both maps are gone, and the parent's programs are as
// before.
func TestJailCleanupLeavesNothing(t *testing.T) {
	kvmDev, kvmOK := kvmNode(t)
	prereq.Root(t)
	root, err := FindCgroup2Mount()
	must(t, err)
	before := programsOn(t, root)
	name := fmt.Sprintf("vmlet-devtest-%d-jail", os.Getpid())
	j, err := NewJail("", name, Baseline(BaselineOptions{}))
	must(t, err)
	t.Cleanup(func() { _ = RemoveCgroup(context.Background(), filepath.Join(root, name)) })
	must(t, j.Filter.Grant(Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)))
	id := onlyProgram(t, j.Cgroup.Path)
	maps := mapIDs(t, id)
	if len(maps) != 2 {
		t.Fatalf("program %d uses maps %v, want grants and rules", id, maps)
	}
	c := startChild(t, j.Cgroup)
	expect(t, "kvm granted in jail", c.open(kvmDev, "rw"), kvmOK)

	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	must(t, j.Close(ctx))
	if _, err := os.Stat(j.Cgroup.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("jail cgroup still exists: %v", err)
	}
	waitFreed(t, id, maps)
	if after := programsOn(t, root); !slices.Equal(after, before) {
		t.Errorf("programs on %s: before %v, after %v", root, before, after)
	}
}

// TestNewJailFailureLeavesNothing: a jail whose rules do not compile leaves no cgroup behind.
func TestNewJailFailureLeavesNothing(t *testing.T) {
	prereq.Root(t)
	root, err := FindCgroup2Mount()
	must(t, err)
	name := fmt.Sprintf("vmlet-devtest-%d-badjail", os.Getpid())
	if _, err := NewJail("", name, []Rule{{Type: 'x', Access: Read}}); !errors.Is(err, ErrInvalidRule) {
		t.Fatalf("NewJail with a bad rule = %v, want ErrInvalidRule", err)
	}
	if _, err := os.Stat(filepath.Join(root, name)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failed NewJail left its cgroup: %v", err)
	}
}
