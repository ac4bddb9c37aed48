package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/network/dhcp"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// DomainState is what the reconciler needs to know of a launcher's VM.
type DomainState struct {
	State          DomainPhase
	Reason         string // refines State: "user", "guest-shutdown", "crashed", ...
	Accel          string
	AccelReason    string
	QEMUVersion    string
	Pid            int
	AgentConnected bool
	// ServesDHCP: the launcher takes DHCP hand-overs (DHCPHost); one from before that is
	// served by the agent itself. DHCPServed are the interfaces whose DHCP the launcher
	// serves; Leases the guest's current leases on them.
	ServesDHCP bool
	DHCPServed []string
	Leases     []network.Lease
	// Guest is the launcher's latest poll of the guest agent (OS, interfaces): nil before its
	// first answer and from a launcher that does not poll. It may be older than the agent's
	// disconnection (AgentConnected says whether it is current).
	Guest *GuestInfo
	// CPU is the vCPU topology QEMU has now; nil when the domain has no CPU hotplug (or the
	// launcher predates it). BootSockets are the sockets it started with (its live spec).
	CPU         *CPUState
	BootSockets int
	// Memory is the virtio-mem state; nil when the domain has no memory hotplug.
	Memory *MemoryState
	// MigrationRefused says why the launcher would refuse an outgoing migration now (a vCPU
	// unplugged under TCG); empty when one may start.
	MigrationRefused string
	// ExitDetail is how QEMU ended, once it did (the launcher's words: "qemu crash, signal
	// killed", its last stderr lines); empty while it runs.
	ExitDetail string
}

// GuestInfo is what the launcher's guest agent poller reported last.
type GuestInfo struct {
	OS         GuestOS
	Interfaces []GuestInterface
}

// GuestOS is guest-get-osinfo's answer (the guest's os-release and uname).
type GuestOS struct {
	ID, Name, PrettyName, Version, VersionID, KernelRelease, KernelVersion, Machine string
}

// CPUState is the domain's vCPU topology (the launcher's CPUStatus).
type CPUState struct {
	Sockets, Cores, Threads, MaxSockets int
	// UnplugPending are sockets asked to go that the guest has not released yet (counted in
	// Sockets).
	UnplugPending int
}

// MemoryState is the domain's memory with its virtio-mem device (the launcher's MemoryStatus).
type MemoryState struct {
	BootBytes, PluggedBytes, RequestedBytes, MaxBytes, BlockBytes int64
}

// DomainPhase is the launcher's coarse VM state.
type DomainPhase string

// Domain phases as reported by the launcher.
const (
	DomainNone         DomainPhase = "NoDomain"
	DomainStarting     DomainPhase = "Starting"
	DomainRunning      DomainPhase = "Running"
	DomainPaused       DomainPhase = "Paused"
	DomainShuttingDown DomainPhase = "ShuttingDown"
	DomainShutoff      DomainPhase = "Shutoff"
	DomainCrashed      DomainPhase = "Crashed"
	DomainMigratingIn  DomainPhase = "MigratingIn"
)

// Launcher is the node agent's view of one vmlet-launcher: the subset of its API that the VMI
// reconciler drives. qemu/launcher's gRPC client implements it through LauncherClient.
type Launcher interface {
	// Sync defines and starts the domain; the same spec again is a no-op. netns maps NIC ids
	// to the network namespaces their taps live in (the launcher opens them there).
	Sync(ctx context.Context, spec *qemu.Spec, netns map[string]string) error
	// Pause and Unpause return the domain as it is once the call returned.
	Pause(ctx context.Context) (DomainState, error)
	Unpause(ctx context.Context) (DomainState, error)
	Domain(ctx context.Context) (DomainState, error)
	// Watch calls notify once per launcher event until ctx ends or the stream breaks; it
	// returns why it stopped.
	Watch(ctx context.Context, notify func()) error
	// VCPUThreads are the host thread ids of QEMU's vCPUs (QMP query-cpus-fast "thread-id").
	VCPUThreads(ctx context.Context) ([]int, error)
	Close() error
}

// DHCPHost serves a VM's DHCP: the launcher, given each interface's bound sockets and lease
// plan, serves them as long as the VM runs (an agent restart never interrupts them). Leases
// come back in DomainState. A Launcher without it leaves the VM's guests without DHCP.
type DHCPHost interface {
	// ServeDHCP hands over an interface's sockets (the caller closes its copies) and plan;
	// the same interface again replaces its service.
	ServeDHCP(ctx context.Context, plan network.LeasePlan, socks *dhcp.DHCPSockets) error
	// StopDHCP ends an interface's service (idempotent).
	StopDHCP(ctx context.Context, name string) error
}

// Dialer connects to the launcher listening on a ready socket; a non-nil check must accept
// the listening process (launcher.WithPeerCheck), else the dial fails with
// launcher.ErrNotLauncher.
type Dialer func(ctx context.Context, socket string, check launcher.PeerCheck) (Launcher, error)

// PeerChecker is a launcher runtime that knows its launchers' processes (process.Runtime: by
// cgroup), so that the agent talks to no other listener on a launcher's socket.
type PeerChecker interface {
	PeerCheck(id string) launcher.PeerCheck
}

var _ PeerChecker = (*process.Runtime)(nil)

// peerCheck is the runtime's check of launcher uid's socket; nil when it has none.
func (r *VMIReconciler) peerCheck(uid types.UID) launcher.PeerCheck {
	if pc, ok := r.Runtime.(PeerChecker); ok {
		return pc.PeerCheck(string(uid))
	}
	return nil
}

// PIDMapper is a launcher runtime whose launchers run in PID namespaces of their own (launcher
// pods on a kubelet): QEMU's PID as a launcher reports it is one of that namespace, and
// HostPID returns the same process's PID in the agent's namespace (the agent runs with
// hostPID), which VMI status (status.launcher.pid) and everything acting on the process use.
type PIDMapper interface {
	HostPID(id string, pid int) (int, error)
}

// pidMapped is a Launcher whose reported PIDs can be mapped (grpcLauncher).
type pidMapped interface {
	mapPIDs(func(pid int) (int, error))
}

// LauncherRuntime runs launchers on this node: the process runtime in local mode (package
// process); a pod runtime in clusters.
type LauncherRuntime interface {
	Ensure(ctx context.Context, s process.Spec) (process.State, error)
	State(id string) (process.State, error)
	Stop(id string) error
	Remove(ctx context.Context, id string) error
	Socket(id string) string
	Dir(id string) string
	List() ([]string, error)
}

var _ LauncherRuntime = (*process.Runtime)(nil)

// VCPUPlacer is a launcher runtime that keeps QEMU's vCPU threads in a low-weight CPU group of
// their own, below the launcher and QEMU's other threads (process.Runtime with CPU weights).
// The launcher reports QEMU's pid and the thread ids; the runtime moves only that VM's.
type VCPUPlacer interface {
	VCPUsPlaced(id string) (bool, error)
	PlaceVCPUs(id string, qemuPid int, tids []int) error
}

var _ VCPUPlacer = (*process.Runtime)(nil)

// LauncherResizer is a launcher runtime whose launchers' resources follow the VMI's vCPUs and
// memory (CPU and memory hotplug): the CPU weight of the VM's cgroup locally
// (process.Runtime), the launcher pod's requests and limits in a cluster. Resize grows them
// before more is plugged and shrinks them once it was unplugged; an error means the change
// must not be applied.
type LauncherResizer interface {
	Resize(ctx context.Context, id string, r process.Resources) error
}

var _ LauncherResizer = (*process.Runtime)(nil)

// LauncherArgs builds vmlet-launcher's command line for a VMI's run folder.
type LauncherArgs func(runDir, name string, grace time.Duration) []string
