package testguest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
)

// BootOptions configures Boot. The zero value boots the guest with 256 MiB under TCG, with a
// QMP socket, a guest-agent port and the serial console, and no disk or NIC.
type BootOptions struct {
	// Files to boot; zero value: Assets(tb).
	Files Files
	// Cmdline is appended to BaseCmdline (e.g. CmdlineNoACPI).
	Cmdline string
	// MemoryMiB defaults to 256 (NOTES: -m 64 cannot boot this initramfs).
	MemoryMiB int
	// Accel defaults to "tcg". This fixture never picks KVM by itself.
	Accel string
	// DataDisk attaches an Overlay of Files.DataDisk as virtio-blk (id "data0", guest vda).
	DataDisk bool
	// NIC attaches `-netdev user,id=net0 -device virtio-net-pci,netdev=net0,id=nic0` (slirp, in
	// QEMU's process): the guest's eth0 leases 10.0.2.15.
	NIC bool
	// HotplugPorts adds that many empty pcie-root-port devices with ids hp0, hp1, ... for
	// device_add ...,bus=hpN.
	HotplugPorts int
	// ExtraArgs are appended to QEMU's argv.
	ExtraArgs []string
}

// VM is a QEMU process booted by Boot. t.Cleanup kills it and waits for it.
type VM struct {
	Console   *Console  // the guest's serial console (ttyS0) output
	Serial    io.Writer // input to the guest's serial console
	QMPSocket string    // unix socket of the QMP monitor (listening before QEMU starts)
	QGASocket string    // unix socket of the guest agent's virtio-serial port
	Dir       string    // per-VM scratch folder holding the sockets
	PID       int
	Args      []string // QEMU's full argv

	stderr *logbuf.Buffer
	done   chan struct{} // closed when cmd.Wait returned
	state  *os.ProcessState
	err    error
}

// Boot starts qemu-system-x86_64 directly with the test guest and returns at once, without
// waiting for the guest: wait for MarkerReady on vm.Console. QEMU runs with Pdeathsig SIGKILL and
// is killed and reaped by t.Cleanup, which also logs console and stderr when the test failed.
//
// Equivalent to: qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 256 -nographic
// -nodefaults -kernel vmlinuz -initrd initramfs.gz -append "$BaseCmdline" -serial stdio
// -qmp unix:qmp.sock,server=on,wait=off -device virtio-serial-pci
// -chardev socket,id=qga0,path=qga.sock,server=on,wait=off
// -device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0
func Boot(tb testing.TB, opts BootOptions) *VM {
	tb.Helper()
	qemu := prereq.QEMU(tb)
	if opts.Files == (Files{}) {
		opts.Files = Assets(tb)
	}
	dir := socketDir(tb)
	vm := &VM{
		QMPSocket: filepath.Join(dir, "qmp.sock"),
		QGASocket: filepath.Join(dir, "qga.sock"),
		Dir:       dir,
		stderr:    &logbuf.Buffer{},
		done:      make(chan struct{}),
	}
	// QEMU gets already-listening sockets (fd=3, fd=4): clients may connect as soon as Boot
	// returns, and socket paths never reach QEMU's comma-separated option syntax.
	// QEMU gets already-listening sockets (fd=3, fd=4): clients may connect as soon as Boot
	// returns, and socket paths never reach QEMU's comma-separated option syntax. The parent's
	// copies of everything QEMU inherits are closed when Boot returns, also on failure.
	qmpFile := listenUnix(tb, vm.QMPSocket)
	defer qmpFile.Close()
	qgaFile := listenUnix(tb, vm.QGASocket)
	defer qgaFile.Close()
	var overlay string
	if opts.DataDisk {
		overlay = Overlay(tb, opts.Files.DataDisk)
	}
	vm.Args = append([]string{qemu}, qemuArgs(opts, overlay)...)

	serialIn, stdin, err := os.Pipe()
	if err != nil {
		tb.Fatalf("create serial input pipe: %v", err)
	}
	defer serialIn.Close()
	stdout, serialOut, err := os.Pipe()
	if err != nil {
		stdin.Close()
		tb.Fatalf("create serial output pipe: %v", err)
	}
	defer serialOut.Close()
	cmd := exec.Command(qemu, vm.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = serialIn, serialOut, vm.stderr
	cmd.ExtraFiles = []*os.File{qmpFile, qgaFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		stdout.Close()
		tb.Fatalf("start qemu: %v", err)
	}
	// The console must see EOF when QEMU exits: drop the parent's write end now.
	serialOut.Close()
	vm.PID, vm.Serial = cmd.Process.Pid, stdin
	vm.Console = NewConsole(stdout)
	go func() {
		vm.err = cmd.Wait()
		vm.state = cmd.ProcessState
		close(vm.done)
	}()
	tb.Cleanup(func() {
		vm.stop(tb)
		stdin.Close()
		stdout.Close()
	})
	return vm
}

// qemuArgs is QEMU's argv after the program name; QMP is fd 3, the agent's chardev fd 4.
func qemuArgs(opts BootOptions, overlay string) []string {
	mem, accel := opts.MemoryMiB, opts.Accel
	if mem == 0 {
		mem = 256
	}
	if accel == "" {
		accel = "tcg"
	}
	cmdline := strings.TrimSpace(BaseCmdline + " " + opts.Cmdline)
	args := []string{
		"-machine", "q35", "-accel", accel, "-cpu", "max", "-m", strconv.Itoa(mem),
		"-nographic", "-nodefaults", "-no-user-config",
		"-kernel", opts.Files.Kernel, "-initrd", opts.Files.Initrd, "-append", cmdline,
		"-chardev", "stdio,id=serial0,signal=off", "-serial", "chardev:serial0",
		"-chardev", "socket,id=qmp0,fd=3,server=on,wait=off", "-mon", "chardev=qmp0,mode=control",
		"-device", "virtio-serial-pci,id=vser0",
		"-chardev", "socket,id=qga0,fd=4,server=on,wait=off",
		"-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
	}
	if overlay != "" {
		args = append(args,
			"-blockdev", fmt.Sprintf(`{"driver":"qcow2","node-name":"data0","file":{"driver":"file","filename":%q}}`, overlay),
			"-device", "virtio-blk-pci,drive=data0,id=data0")
	}
	if opts.NIC {
		args = append(args, "-netdev", "user,id=net0",
			"-device", "virtio-net-pci,netdev=net0,id=nic0,romfile=")
	}
	for i := range opts.HotplugPorts {
		args = append(args, "-device",
			fmt.Sprintf("pcie-root-port,id=hp%d,chassis=%d,bus=pcie.0", i, i+1))
	}
	return append(args, opts.ExtraArgs...)
}

// Exited is closed once QEMU has exited and been reaped.
func (vm *VM) Exited() <-chan struct{} { return vm.done }

// Wait waits until QEMU exits or ctx ends and returns its process state.
func (vm *VM) Wait(ctx context.Context) (*os.ProcessState, error) {
	select {
	case <-vm.done:
		return vm.state, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for qemu pid %d: %w", vm.PID, ctx.Err())
	}
}

// Stderr returns what QEMU wrote to stderr so far.
func (vm *VM) Stderr() string { return vm.stderr.String() }

// Kill sends SIGKILL to QEMU (if it still runs); use Wait or Exited to see it gone.
func (vm *VM) Kill() {
	select {
	case <-vm.done:
	default:
		_ = syscall.Kill(vm.PID, syscall.SIGKILL)
	}
}

// stop kills QEMU, reaps it and waits for the console reader to see EOF.
func (vm *VM) stop(tb testing.TB) {
	vm.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := vm.Wait(ctx); err != nil {
		tb.Errorf("stop qemu: %v", err)
	}
	select {
	case <-vm.Console.Done():
	case <-ctx.Done():
		tb.Errorf("stop qemu: console reader still running: %v", ctx.Err())
	}
	if tb.Failed() {
		tb.Logf("qemu %s\nstderr:\n%s\nconsole:\n%s", strings.Join(vm.Args, " "), vm.Stderr(),
			vm.Console.String())
	}
}

// socketDir returns tb.TempDir() when unix socket paths in it fit in sun_path (108 bytes),
// else a shorter folder under /tmp removed by t.Cleanup.
func socketDir(tb testing.TB) string {
	dir := tb.TempDir()
	if len(dir)+len("/qmp.sock") < 100 {
		return dir
	}
	dir, err := os.MkdirTemp("/tmp", "vmlet-vm")
	if err != nil {
		tb.Fatalf("create socket dir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// listenUnix binds a listening unix socket at path and returns it as a file for QEMU. The
// socket file stays in place (tb.TempDir removes it).
func listenUnix(tb testing.TB, path string) *os.File {
	tb.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		tb.Fatalf("listen on %s: %v", path, err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close()
	if err != nil {
		tb.Fatalf("get fd of %s: %v", path, err)
	}
	return f
}

// Stop kills QEMU and waits until it is reaped (t.Cleanup does the same if the test does not).
func (vm *VM) Stop(ctx context.Context) error {
	vm.Kill()
	_, err := vm.Wait(ctx)
	return err
}
