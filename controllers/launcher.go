package controllers

import (
	"context"
	"time"

	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/qemu"
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

// Dialer connects to the launcher listening on a ready socket.
type Dialer func(ctx context.Context, socket string) (Launcher, error)

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

// LauncherArgs builds vmlet-launcher's command line for a VMI's run folder.
type LauncherArgs func(runDir, name string, grace time.Duration) []string
