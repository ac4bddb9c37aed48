package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/internal/subresclient"
	"github.com/vmlet/vmlet/internal/subresclient/subrestest"
)

// fakeAPI is a subresources server (subrestest) with three users, one per role, each with
// a kubeconfig whose context namespace is "prod", and two VMIs there: vm1 runs, off does not.
type fakeAPI struct {
	*subrestest.Server
	admin, edit, view string // kubeconfig paths
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	s := subrestest.New(t)
	s.AddUser("tok-alice", "alice", subrestest.Admin)
	s.AddUser("tok-bob", "bob", subrestest.Edit)
	s.AddUser("tok-carol", "carol", subrestest.View)
	s.AddVMI("prod", "vm1", &subrestest.VMI{
		Running: true,
		Info: subresclient.GuestAgentInfo{
			GuestAgentVersion: "7.2.0", Hostname: "vm1",
			OS: vmletv1.VirtualMachineInstanceGuestOSInfo{Name: "Debian GNU/Linux", PrettyName: "Debian GNU/Linux 12 (bookworm)",
				ID: "debian", Version: "12 (bookworm)", VersionID: "12", KernelRelease: "6.1.0-28-cloud-amd64", Machine: "x86_64"},
		},
		Users: []subresclient.GuestOSUser{{UserName: "root", LoginTime: 1764619200.5}, {UserName: "debian", Domain: "LAB"}},
		Filesystems: []subresclient.FileSystem{
			{DiskName: "vda1", MountPoint: "/", FileSystemType: "ext4", UsedBytes: 512 << 20, TotalBytes: 2 << 30},
			{MountPoint: "/run", FileSystemType: "tmpfs", TotalBytes: 0},
		},
	})
	s.AddVMI("prod", "off", &subrestest.VMI{Running: false})
	dir := t.TempDir()
	noKubeconfig(t)
	t.Setenv("HOME", dir) // the QMP shell's default history file
	return &fakeAPI{Server: s,
		admin: s.Kubeconfig(t, dir, "tok-alice", "prod"),
		edit:  s.Kubeconfig(t, dir, "tok-bob", "prod"),
		view:  s.Kubeconfig(t, dir, "tok-carol", "prod"),
	}
}

// vmctlIn runs one command line in process with stdin.
func vmctlIn(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := newCLI(stdin, &out, &errb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, c, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// lines is a writer whose text a test can wait for.
type lines struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wait returns the first match of re's first group once the text has one.
func (l *lines) wait(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		m := re.FindStringSubmatch(l.b.String())
		ch := l.changed
		l.mu.Unlock()
		if m != nil {
			return m[len(m)-1]
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("output never matched %s:\n%s", re, l.String())
		}
	}
}

// bg is a vmctl command running in the background until stop.
type bg struct {
	stdout, stderr *lines
	cancel         context.CancelFunc
	done           chan int
}

// vmctlBG runs args in the background; stdout and stderr are captured unless c has its own.
func vmctlBG(t *testing.T, c *cli, args ...string) *bg {
	t.Helper()
	b := &bg{stdout: newLines(), stderr: newLines(), done: make(chan int, 1)}
	if c.stdout == nil {
		c.stdout = b.stdout
	}
	if c.stderr == nil {
		c.stderr = b.stderr
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.done <- run(ctx, c, args) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

// stop cancels (^C) and returns the exit status.
func (b *bg) stop(t *testing.T) int {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("vmctl did not stop after ^C; stdout:\n%s\nstderr:\n%s", b.stdout, b.stderr)
		return -1
	}
}

// exited waits for the command to end by itself.
func (b *bg) exited(t *testing.T) int {
	t.Helper()
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("vmctl did not end; stdout:\n%s\nstderr:\n%s", b.stdout, b.stderr)
		return -1
	}
}
