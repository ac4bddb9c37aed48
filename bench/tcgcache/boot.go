package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/accel"
)

// prompt is what systemd's serial getty prints once the guest is up ("distroguest login: ").
var prompt = []byte("login:")

// Guest is the distribution guest every boot runs.
type Guest struct {
	Kernel, Initrd, Cmdline string
	Root                    string // raw root filesystem, the backing file of each boot's overlay
	MemoryMiB, VCPUs        int
}

// booted is a guest at its login prompt: pid is its QEMU, stop ends it.
type booted struct {
	pid  int
	stop func()
}

// errExited is a QEMU that ended before the prompt.
var errExited = errors.New("qemu exited before the login prompt")

// boot starts g under c with a fresh overlay in dir, waits for the login prompt and measures.
// It leaves no QEMU running.
func boot(ctx context.Context, g Guest, c Config, dir string, timeout time.Duration) (Boot, error) {
	b := Boot{Config: c, Load1Before: load1()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", g.Root, overlay).CombinedOutput(); err != nil {
		return b, fmt.Errorf("create overlay: %w: %s", err, out)
	}
	console := filepath.Join(dir, "console.log")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	var vm booted
	var exited <-chan struct{}
	var err error
	switch c.Mode {
	case "qemu":
		vm, exited, err = startPlain(g, c.TBSizeMiB, overlay, console)
	case "vmlet":
		vm, exited, err = startVmlet(ctx, g, c.TBSizeMiB, overlay, dir, console)
	default:
		err = fmt.Errorf("unknown mode %q", c.Mode)
	}
	if err != nil {
		return b, err
	}
	defer vm.stop()
	if err := waitPrompt(ctx, console, exited); err != nil {
		return b, fmt.Errorf("%s: %w (console tail: %q)", c.Label(), err, tail(console, 400))
	}
	b.Seconds = time.Since(t0).Seconds()
	if b.CPUSeconds, err = cpuTime(vm.pid); err != nil {
		return b, err
	}
	b.RSSMiB, b.PeakRSSMiB, err = rss(vm.pid)
	b.Load1After = load1()
	return b, err
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on every Linux ABI vmlet
// runs on).
const clockTick = 100

// cpuTime is pid's user + system CPU time in seconds, all threads (/proc/PID/stat utime and
// stime). Under TCG it is the translation and emulation work, which the other sessions' load
// inflates far less than the wall-clock boot time.
func cpuTime(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read qemu cpu time: %w", err)
	}
	// Fields after the command name (which may hold spaces) start at state, field 3.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("read qemu cpu time: short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("read qemu cpu time: %w", err)
	}
	return (ut + st) / clockTick, nil
}

// startPlain execs QEMU with a plain command line: what a person would type.
func startPlain(g Guest, tbMiB int, overlay, console string) (booted, <-chan struct{}, error) {
	acc := "tcg"
	if tbMiB > 0 {
		acc += ",tb-size=" + strconv.Itoa(tbMiB)
	}
	cmd := exec.Command("qemu-system-x86_64",
		"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", "q35", "-accel", acc, "-cpu", "max",
		"-smp", strconv.Itoa(g.VCPUs), "-m", strconv.Itoa(g.MemoryMiB),
		"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", g.Cmdline,
		"-drive", "file="+overlay+",if=none,id=root,format=qcow2",
		"-device", "virtio-blk-pci,drive=root",
		"-chardev", "file,id=console,path="+console, "-serial", "chardev:console")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return booted{}, nil, fmt.Errorf("start qemu: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	return booted{pid: cmd.Process.Pid, stop: stop}, exited, nil
}

// startVmlet starts the guest through vmlet's driver with the node agent's devices.
func startVmlet(ctx context.Context, g Guest, tbMiB int, overlay, dir, console string) (booted, <-chan struct{}, error) {
	spec := &qemu.Spec{
		Name:         "distroguest",
		Machine:      "q35",
		Accel:        qemu.AccelTCG,
		TCGCacheMiB:  tbMiB,
		CPU:          qemu.CPU{Model: "max", Sockets: 1, Cores: g.VCPUs, Threads: 1},
		MemoryMiB:    g.MemoryMiB,
		Boot:         qemu.Boot{Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline},
		Disks:        []qemu.Disk{{ID: "root", Path: overlay, Format: qemu.FormatQCOW2, BootIndex: 1}},
		Serial:       &qemu.Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: console},
		Agent:        &qemu.Agent{Socket: filepath.Join(dir, "agent.sock")},
		SCSI:         true,
		HotplugPorts: 4,
	}
	d := accel.Decision{Accel: accel.TCG, Reason: "benchmark: TCG in every mode"}
	vm, err := qemu.Start(ctx, spec, qemu.StartOptions{Accel: &d, QMPSocket: filepath.Join(dir, "qmp.sock")})
	if err != nil {
		return booted{}, nil, fmt.Errorf("start vmlet: %w", err)
	}
	stop := func() {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = vm.Kill(kctx)
		<-vm.Exited()
	}
	return booted{pid: vm.Info().PID, stop: stop}, vm.Exited(), nil
}

// waitPrompt polls the console log until it shows the login prompt.
func waitPrompt(ctx context.Context, console string, exited <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(console); err == nil && bytes.Contains(b, prompt) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the login prompt: %w", ctx.Err())
		case <-exited:
			return errExited
		case <-tick.C:
		}
	}
}

// rss reads VmRSS and VmHWM of pid in MiB. Equivalent to `grep -E 'Vm(RSS|HWM)' /proc/PID/status`.
func rss(pid int) (cur, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read qemu memory: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return cur, peak, nil
}

// load1 is the 1-minute load average (/proc/loadavg), -1 when unreadable.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
