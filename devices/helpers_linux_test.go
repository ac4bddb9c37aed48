package devices

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vmlet/vmlet/test/prereq"
	"golang.org/x/sys/unix"
)

const opTimeout = 10 * time.Second

var cgroupSeq atomic.Int64

// newTestCgroup creates a fresh cgroup under the cgroup2 root; cleanup removes it and checks
// that the directory is gone.
func newTestCgroup(t testing.TB) *Cgroup {
	t.Helper()
	prereq.Root(t)
	name := fmt.Sprintf("vmlet-devtest-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	cg, err := NewCgroup("", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := cg.Remove(ctx); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
		if _, err := os.Stat(cg.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s still exists after removal (stat: %v)", cg.Path, err)
		}
	})
	return cg
}

// child is a "serve" helper process running inside a cgroup.
type child struct {
	t   testing.TB
	cmd *exec.Cmd
	in  *os.File
	out *os.File
	rd  *bufio.Reader
}

func startChild(t testing.TB, cg *Cgroup) *child {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=serve")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cg.Start(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, in: inW, out: outR, rd: bufio.NewReader(outR)}
	t.Cleanup(func() {
		c.in.Close() // EOF ends serve; if the cgroup was killed first, Wait reports the signal
		timer := time.AfterFunc(opTimeout, func() { _ = cmd.Process.Kill() })
		defer timer.Stop()
		_ = cmd.Wait()
		c.out.Close()
	})
	return c
}

// do sends one command and returns the answer line, failing the test after opTimeout.
func (c *child) do(line string) string {
	c.t.Helper()
	if err := c.out.SetReadDeadline(time.Now().Add(opTimeout)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		c.t.Fatalf("send %q: %v", line, err)
	}
	s, err := c.rd.ReadString('\n')
	if err != nil {
		c.t.Fatalf("answer to %q: %v", line, err)
	}
	return strings.TrimSpace(s)
}

func (c *child) errno(line string) unix.Errno {
	c.t.Helper()
	s := c.do(line)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		c.t.Fatalf("%q answered %q", line, s)
	}
	return unix.Errno(n)
}

func (c *child) open(path, mode string) unix.Errno {
	return c.errno(fmt.Sprintf("open %s %s", path, mode))
}

func (c *child) mknod(path, typ string, major, minor uint32) unix.Errno {
	return c.errno(fmt.Sprintf("mknod %s %s %d %d", path, typ, major, minor))
}

// expect checks one operation's errno: 0 or EPERM as wanted.
func expect(t *testing.T, what string, got, want unix.Errno) {
	t.Helper()
	if got != want {
		t.Errorf("%s: errno %d (%v), want %d (%v)", what, got, got, want, want)
	}
}

// programsOn returns the device programs attached directly to the cgroup at path.
func programsOn(t testing.TB, path string) []ebpf.ProgramID {
	t.Helper()
	f, err := openCgroup(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]ebpf.ProgramID, len(res.Programs))
	for i, p := range res.Programs {
		ids[i] = p.ID
	}
	return ids
}

func onlyProgram(t testing.TB, path string) ebpf.ProgramID {
	t.Helper()
	ids := programsOn(t, path)
	if len(ids) != 1 {
		t.Fatalf("%s carries %d device programs %v, want exactly 1", path, len(ids), ids)
	}
	return ids[0]
}

// loopDevice attaches a fresh loop device to a 1 MiB file (LOOP_CTL_GET_FREE, LOOP_CONFIGURE;
// losetup -f --show file) and detaches it at cleanup (LOOP_CLR_FD).
func loopDevice(t *testing.T) (path string, major, minor uint32) {
	t.Helper()
	prereq.Root(t)
	backing := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	bf, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	for range 10 { // another process may take the free device between the two ioctls
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Fatalf("LOOP_CTL_GET_FREE: %v", err)
		}
		path = fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &unix.LoopConfig{Fd: uint32(bf.Fd())})
		if errors.Is(err, unix.EBUSY) {
			dev.Close()
			continue
		}
		if err != nil {
			dev.Close()
			t.Fatalf("LOOP_CONFIGURE %s: %v", path, err)
		}
		t.Cleanup(func() {
			if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
				t.Errorf("LOOP_CLR_FD %s: %v", path, err)
			}
			dev.Close()
		})
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return path, unix.Major(st.Rdev), unix.Minor(st.Rdev)
	}
	t.Fatal("no free loop device after 10 tries")
	return "", 0, 0
}

// waitFreed waits until the kernel no longer knows the program and maps. The kernel frees a
// detached cgroup's programs from a workqueue and maps after an RCU grace period, and offers
// no event for it, so this re-checks the condition every 10 ms up to a deadline.
func waitFreed(t *testing.T, prog ebpf.ProgramID, maps []ebpf.MapID) {
	t.Helper()
	gone := func() bool {
		if p, err := ebpf.NewProgramFromID(prog); err == nil {
			p.Close()
			return false
		}
		for _, id := range maps {
			if m, err := ebpf.NewMapFromID(id); err == nil {
				m.Close()
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(opTimeout)
	for !gone() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("program %d or maps %v still exist %s after cleanup", prog, maps, opTimeout)
		}
	}
}

// mapIDs returns the ids of the maps a program uses.
func mapIDs(t *testing.T, id ebpf.ProgramID) []ebpf.MapID {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	return ids
}

// kvmNode is the device node the tests grant and deny, KVM's (misc 10:232), and the errno an
// open of it gives once the filter allows it: /dev/kvm and 0 where the kvm module made it;
// else a node of that number made in /dev for the test (removed after it) and ENODEV, as no
// driver serves the number. The cgroup's device check comes before the driver, so a denied
// open is EPERM either way.
func kvmNode(t testing.TB) (string, unix.Errno) {
	t.Helper()
	if _, err := os.Stat("/dev/kvm"); err == nil {
		return "/dev/kvm", 0
	}
	path := fmt.Sprintf("/dev/vmlet-test-kvm-%d", os.Getpid())
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(MiscMajor, KVMMinor))); err != nil && !errors.Is(err, unix.EEXIST) {
		t.Fatalf("make a node for misc %d:%d: %v", MiscMajor, KVMMinor, err)
	}
	t.Cleanup(func() { _ = os.Remove(path) })
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return path, 0 // served after all (the module loaded on demand)
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		t.Fatal(err)
	}
	return path, errno
}
