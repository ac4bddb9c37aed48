package imagebuild

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
)

// ctrTimeout bounds one ctr command (an import of the 50 MB vmlet image included).
const ctrTimeout = 3 * time.Minute

// privateContainerd is a containerd of the test's own: its root, state, sockets and runc root
// in dir, the CRI plugin off, containers in cgroups under /<cgroupParent>.
type privateContainerd struct {
	t            *testing.T
	dir          string
	address      string
	runcRoot     string
	cgroupParent string
	cmd          *exec.Cmd
	exited       chan struct{}
}

// startContainerd starts containerd with a config in dir and waits until it answers.
func startContainerd(t *testing.T, dir string) *privateContainerd {
	t.Helper()
	c := &privateContainerd{t: t, dir: dir, address: filepath.Join(dir, "c.sock"), runcRoot: filepath.Join(dir, "runc"),
		cgroupParent: fmt.Sprintf("vmlet-imagetest-%d", os.Getpid()), exited: make(chan struct{})}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.address, c.address+".ttrpc")
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	c.cmd = exec.Command("containerd", "--config", conf)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() { c.stop() })
	poll.Until(t, time.Minute, "private containerd answers", func() (bool, string) {
		select {
		case <-c.exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("containerd exited: %s", poll.Tail(string(b), 2000))
		default:
		}
		out, err := exec.Command("ctr", "-a", c.address, "version").CombinedOutput()
		return err == nil, string(out)
	})
	return c
}

// ctr runs ctr against the private containerd in namespace k8s.io.
func (c *privateContainerd) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ctrTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", c.address, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// runArgs are `ctr run` options for container id: our runc root and cgroup.
func (c *privateContainerd) runArgs(id string) []string {
	return []string{"--runc-root", c.runcRoot, "--cgroup", "/" + c.cgroupParent + "/" + id}
}

// stop ends containerd with SIGTERM (SIGKILL after a minute) and waits for it.
func (c *privateContainerd) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// processesMentioning are the pids whose command line contains s.
func processesMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) && poll.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder are the mount points of this mount namespace at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// cgroupMounts are the mount points of every cgroup (v1) and cgroup2 hierarchy.
func cgroupMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			out = append(out, strings.Fields(line)[4])
		}
	}
	return out
}

// unixSockets are the paths of the unix sockets process pid has open (/proc/PID/fd →
// socket inodes → /proc/net/unix).
func unixSockets(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && inodes[f[6]] && strings.HasPrefix(f[7], "/") {
			out = append(out, f[7])
		}
	}
	return out
}
