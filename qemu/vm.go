package qemu

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// VM is a running QEMU process and its QMP monitor. Its lifetime is not tied to the context
// given to Start; it ends when QEMU exits (Exited is closed then). All methods are safe for
// concurrent use.
type VM struct {
	spec     Spec // as started; devices live in disks/nics
	resolved Resolved
	argv     []string
	proc     *process
	stderr   *tailBuffer
	mon      *qmp.Monitor
	log      *slog.Logger
	version  string

	devMu     sync.Mutex // serializes hotplug operations
	mu        sync.Mutex // guards the device records and files
	files     []string   // sockets and folders created for this VM; removed once QEMU exited
	rootPorts int
	disks     []Disk          // attached, in attach order, Port pinned to the slot, Files dropped
	fdsets    map[string]int  // disk id → add-fd set of its handed Files (diskfiles.go)
	nextFdset int             // the next disk fdset id (from firstDiskFdset)
	nics      []NIC           // attached, in attach order, Port pinned, TapFDs dropped
	nbdSocket string          // the NBD server's socket while one runs (nbd.go)
	exports   []string        // disk ids exported by the NBD server
	mirrors   []string        // disk ids with a mirror job and an NBD client node (mirror.go)
	tlsCreds  map[string]bool // ids of the tls-creds-x509 objects AddTLSCreds created
	// unplugging are the devices whose device_del QEMU accepted but the guest has not
	// released yet (under devMu).
	unplugging map[string]bool
	// cpuDevs are the vCPUs with an id (every socket but 0, see cpuhotplug.go): id → socket;
	// cpuUnplugging those whose device_del the guest has not completed yet.
	cpuDevs       map[string]int
	cpuUnplugging map[string]bool
	cpuUnplugged  bool // a vCPU was unplugged since start (tcg_vcpus.go)
	// memRequestedMiB is the virtio-mem requested size last set (memhotplug.go).
	memRequestedMiB int

	killed     atomic.Bool
	shutdown   atomic.Pointer[shutdownEvent] // last SHUTDOWN event seen
	eventsDone chan struct{}                 // closed when the SHUTDOWN watcher ended
	exited     chan struct{}
	exit       ExitInfo // set before exited is closed
}

// Info describes a running VM.
type Info struct {
	Name        string
	PID         int
	Version     string // QEMU version from the QMP greeting, e.g. "7.2.22"
	Accel       accel.Kind
	AccelReason string // why this accelerator (accel.Probe's reason or the spec's choice)
	Machine     string // machine type actually used
	CPUModel    string // CPU model actually used
	Argv        []string
}

// ExitReason classifies how QEMU ended.
type ExitReason string

// Exit reasons.
const (
	// ExitGuestShutdown: the guest powered off (SHUTDOWN event with guest:true, then exit 0).
	ExitGuestShutdown ExitReason = "guest-shutdown"
	// ExitHostQuit: QEMU was told to quit (quit command, SIGTERM) and exited 0.
	ExitHostQuit ExitReason = "host-quit"
	// ExitGuestPanic: the guest panicked and told QEMU through a panic device (GUEST_PANICKED,
	// or a SHUTDOWN event with reason guest-panic); QEMU paused it and vmlet quit QEMU (status
	// 0, see panicArgs), or QEMU exited by itself: PanicExitStatus (-action
	// panic=exit-failure) or 0 (its default panic=shutdown), which would otherwise read as the
	// guest powering off.
	ExitGuestPanic ExitReason = "guest-panic"
	// ExitCrash: QEMU died from a signal (including vmlet's own SIGKILL, see Killed) or exited
	// with a non-zero status.
	ExitCrash ExitReason = "crash"
)

// ExitInfo is how and why QEMU exited.
type ExitInfo struct {
	Reason ExitReason
	Code   int            // exit status; -1 when killed by a signal
	Signal syscall.Signal // the killing signal, 0 if none
	// Killed: vmlet sent SIGKILL (Kill, or Shutdown's last resort).
	Killed bool
	// ShutdownReason is the reason of the last SHUTDOWN event ("guest-shutdown",
	// "host-qmp-quit", "host-signal", ...), empty if none was seen.
	ShutdownReason string
	// Stderr is the tail of QEMU's standard error.
	Stderr string
	At     time.Time
}

// shutdownGuestPanic is the SHUTDOWN event's reason after a guest panic (QAPI ShutdownCause
// guest-panic).
const shutdownGuestPanic = "guest-panic"

type shutdownEvent struct {
	Guest  bool   `json:"guest"`
	Reason string `json:"reason"`
}

// Exited is closed once QEMU has exited, been reaped, and vmlet removed the sockets it created.
func (vm *VM) Exited() <-chan struct{} { return vm.exited }

// ExitInfo reports how QEMU exited; ok is false while it still runs.
func (vm *VM) ExitInfo() (info ExitInfo, ok bool) {
	select {
	case <-vm.exited:
		return vm.exit, true
	default:
		return ExitInfo{}, false
	}
}

// Info returns static facts about the VM.
func (vm *VM) Info() Info {
	return Info{
		Name:        vm.spec.Name,
		PID:         vm.proc.pid(),
		Version:     vm.version,
		Accel:       vm.resolved.Accel,
		AccelReason: vm.resolved.AccelReason,
		Machine:     vm.resolved.Machine,
		CPUModel:    vm.resolved.CPUModel,
		Argv:        append([]string(nil), vm.argv...),
	}
}

// Monitor returns the QMP monitor, for raw QMP (the launcher's debugging proxy). Commands
// sent there bypass the VM's device bookkeeping: do not hotplug through it.
func (vm *VM) Monitor() *qmp.Monitor { return vm.mon }

// watchShutdown records SHUTDOWN events until the monitor is gone, then closes eventsDone.
// The subscription exists before the guest runs, and the monitor delivers every event it read
// before closing the channel, so no SHUTDOWN can be missed.
//
// A guest panic (GUEST_PANICKED; QEMU paused the guest, -action panic=pause) is recorded as
// the guest-panic SHUTDOWN it stands for, which no later SHUTDOWN replaces, and QEMU is told
// to quit: the VM ends with it, as QEMU's own exit would end it, but only once the event was
// read.
func (vm *VM) watchShutdown(events <-chan qmp.Event, cancel func()) {
	defer close(vm.eventsDone)
	defer cancel()
	for e := range events {
		prev := vm.shutdown.Load()
		s := shutdownFrom(e, prev)
		if s == nil {
			continue
		}
		vm.shutdown.Store(s)
		if e.Name == "GUEST_PANICKED" && prev == nil {
			go vm.quitPanicked()
		}
	}
}

// panicQuitTimeout bounds the quit after a guest panic.
const panicQuitTimeout = 30 * time.Second

// quitPanicked quits QEMU after its guest panicked (QEMU paused it). A QEMU that does not quit
// is left to whoever stops the VM: its exit still reads as the panic it was.
func (vm *VM) quitPanicked() {
	ctx, cancel := context.WithTimeout(context.Background(), panicQuitTimeout)
	defer cancel()
	if err := vm.Quit(ctx); err != nil {
		vm.log.Warn("quit qemu after the guest panicked", "err", err)
	}
}

// shutdownFrom is what event e (SHUTDOWN or GUEST_PANICKED) says of how QEMU will end, given
// what was seen before (prev), or nil if it says nothing new. A GUEST_PANICKED whose action is
// pause (vmlet's -action panic=pause, after which the VM quits QEMU) or poweroff (QEMU exits
// by itself) counts as a SHUTDOWN of reason guest-panic; once a panic is recorded, no later
// SHUTDOWN (the quit's, host-qmp-quit, or QEMU's own guest-panic one) replaces it. Pure.
func shutdownFrom(e qmp.Event, prev *shutdownEvent) *shutdownEvent {
	if prev != nil && prev.Reason == shutdownGuestPanic {
		return nil
	}
	switch e.Name {
	case "SHUTDOWN":
		var s shutdownEvent
		if json.Unmarshal(e.Data, &s) != nil {
			return nil
		}
		return &s
	case "GUEST_PANICKED":
		var p struct {
			Action string `json:"action"`
		}
		if prev != nil || json.Unmarshal(e.Data, &p) != nil || (p.Action != "poweroff" && p.Action != "pause") {
			return nil
		}
		return &shutdownEvent{Guest: true, Reason: shutdownGuestPanic}
	}
	return nil
}

// eventDrainTimeout bounds how long supervise waits for the monitor to report EOF after QEMU
// was reaped; QEMU's death closes the socket, so this only guards against a stuck reader.
const eventDrainTimeout = 5 * time.Second

// supervise waits for QEMU to exit, classifies the exit, cleans up and closes exited.
func (vm *VM) supervise() {
	<-vm.proc.done
	drain := time.NewTimer(eventDrainTimeout)
	select {
	case <-vm.eventsDone:
	case <-drain.C:
		vm.log.Warn("qmp monitor did not end after qemu exited")
	}
	drain.Stop()
	vm.mon.Close()
	vm.exit = classifyExit(vm.proc, vm.shutdown.Load(), vm.killed.Load(), vm.stderr.String())
	vm.mu.Lock()
	files := vm.files
	vm.mu.Unlock()
	removeAll(vm.log, files)
	vm.log.Info("qemu exited", "reason", vm.exit.Reason, "code", vm.exit.Code, "signal", vm.exit.Signal,
		"killed", vm.exit.Killed, "shutdownReason", vm.exit.ShutdownReason)
	close(vm.exited)
}

// classifyExit is the pure exit classification.
func classifyExit(p *process, sd *shutdownEvent, killed bool, stderr string) ExitInfo {
	info := ExitInfo{Code: -1, Killed: killed, Stderr: stderr, At: time.Now()}
	if sd != nil {
		info.ShutdownReason = sd.Reason
	}
	if p.state == nil {
		info.Reason = ExitCrash
		return info
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		info.Signal = ws.Signal()
		info.Reason = ExitCrash
		return info
	}
	info.Code = p.state.ExitCode()
	switch {
	case sd != nil && sd.Reason == shutdownGuestPanic && (info.Code == 0 || info.Code == PanicExitStatus):
		info.Reason = ExitGuestPanic
	case info.Code != 0:
		info.Reason = ExitCrash
	case sd != nil && sd.Guest:
		info.Reason = ExitGuestShutdown
	default:
		info.Reason = ExitHostQuit
	}
	return info
}

// greetingVersion is QEMU's version from the QMP greeting, "major.minor.micro".
func greetingVersion(m *qmp.Monitor) string {
	return m.Greeting().Version.String()
}
