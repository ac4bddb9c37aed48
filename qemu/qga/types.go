package qga

import (
	"errors"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// Error is an agent error reply {"error": {"class", "desc"}}; the same type as QMP's, so one
// errors.As serves both.
type Error = qmp.Error

// Sentinels, shared with package qmp so callers test one value for both protocols.
var (
	// ErrTimeout: a request was sent (its deadline runs from then) and the agent did not
	// answer in time. The stream is resynchronised before the next request.
	ErrTimeout      = qmp.ErrTimeout
	ErrDisconnected = qmp.ErrDisconnected // the socket is gone (QEMU exited, or Close)
	ErrClosed       = qmp.ErrClosed       // Close was called (wrapped with ErrDisconnected)
	// ErrBadMode: guest-shutdown modes are "powerdown", "reboot" and "halt".
	ErrBadMode = errors.New("qga: invalid shutdown mode")
	// ErrBusy: a request was never sent: it waited Options.QueueTimeout (or until its context's
	// deadline) for the channel while earlier requests held it. It says nothing about whether
	// the agent answers; the stream is untouched.
	ErrBusy = errors.New("qga: agent busy")
	// ErrStillRunning: Wait (or Run) ended, with its context, before the guest process exited.
	// The process keeps running: qemu-ga has no command to kill it.
	ErrStillRunning = errors.New("qga: guest process still running")
)

// DefaultCommandTimeout bounds requests when Options.DefaultTimeout is zero.
const DefaultCommandTimeout = 10 * time.Second

// DefaultQueueTimeout bounds the wait for the channel when Options.QueueTimeout is zero.
const DefaultQueueTimeout = 10 * time.Second

// Options configure an Agent. The zero value is usable.
type Options struct {
	// DefaultTimeout bounds each request (including a resync before it) from the moment it
	// gets the channel and is sent, unless CommandTimeouts has an entry; a sooner context
	// deadline wins. Time spent queued behind other requests does not count (QueueTimeout
	// bounds that). Zero means DefaultCommandTimeout.
	DefaultTimeout time.Duration
	// CommandTimeouts overrides DefaultTimeout per command (e.g. "guest-fsfreeze-freeze").
	CommandTimeouts map[string]time.Duration
	// QueueTimeout bounds how long a request waits for the channel while earlier requests use
	// it (qemu-ga answers one at a time); a sooner context deadline wins. A request that waited
	// so long fails with ErrBusy without being sent. Zero means DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Tap, if set, sees every line sent and received (qmp.Record; kind "command" or "reply",
	// or "unknown" for discarded input). Called synchronously: keep it fast.
	Tap func(qmp.Record)
}

func (o Options) queueTimeout() time.Duration {
	if o.QueueTimeout > 0 {
		return o.QueueTimeout
	}
	return DefaultQueueTimeout
}

func (o Options) timeout(cmd string) time.Duration {
	if d, ok := o.CommandTimeouts[cmd]; ok && d > 0 {
		return d
	}
	if o.DefaultTimeout > 0 {
		return o.DefaultTimeout
	}
	return DefaultCommandTimeout
}

// Info is guest-info's reply.
type Info struct {
	Version           string        `json:"version"`
	SupportedCommands []CommandInfo `json:"supported_commands"`
}

// Supports reports whether the agent offers cmd and has it enabled.
func (i Info) Supports(cmd string) bool {
	for _, c := range i.SupportedCommands {
		if c.Name == cmd {
			return c.Enabled
		}
	}
	return false
}

// CommandInfo is one entry of Info.SupportedCommands.
type CommandInfo struct {
	Name            string `json:"name"`
	Enabled         bool   `json:"enabled"`
	SuccessResponse bool   `json:"success-response"` // false: no reply on success
}

// OSInfo is guest-get-osinfo's reply; fields the guest cannot tell are empty.
type OSInfo struct {
	KernelRelease string `json:"kernel-release"`
	KernelVersion string `json:"kernel-version"`
	Machine       string `json:"machine"`
	ID            string `json:"id"`
	Name          string `json:"name"`
	PrettyName    string `json:"pretty-name"`
	Version       string `json:"version"`
	VersionID     string `json:"version-id"`
	Variant       string `json:"variant"`
	VariantID     string `json:"variant-id"`
}

// Interface is one entry of guest-network-get-interfaces.
type Interface struct {
	Name            string          `json:"name"`
	HardwareAddress string          `json:"hardware-address"`
	IPAddresses     []IPAddress     `json:"ip-addresses"`
	Statistics      *InterfaceStats `json:"statistics,omitempty"`
}

// IPAddress is an interface address.
type IPAddress struct {
	Type    string `json:"ip-address-type"` // "ipv4" or "ipv6"
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// InterfaceStats are an interface's counters.
type InterfaceStats struct {
	RxBytes   uint64 `json:"rx-bytes"`
	RxPackets uint64 `json:"rx-packets"`
	RxErrs    uint64 `json:"rx-errs"`
	RxDropped uint64 `json:"rx-dropped"`
	TxBytes   uint64 `json:"tx-bytes"`
	TxPackets uint64 `json:"tx-packets"`
	TxErrs    uint64 `json:"tx-errs"`
	TxDropped uint64 `json:"tx-dropped"`
}

// User is one entry of guest-get-users.
type User struct {
	Name      string  `json:"user"`
	Domain    string  `json:"domain,omitempty"` // Windows only
	LoginTime float64 `json:"login-time"`       // seconds since the epoch
}

// FS is one entry of guest-get-fsinfo.
type FS struct {
	Name       string   `json:"name"`
	Mountpoint string   `json:"mountpoint"`
	Type       string   `json:"type"`
	UsedBytes  *uint64  `json:"used-bytes,omitempty"`
	TotalBytes *uint64  `json:"total-bytes,omitempty"`
	Disks      []FSDisk `json:"disk"`
}

// FSDisk is a disk under a filesystem (GuestDiskAddress). For a SCSI disk, Bus, Target and
// Unit are the channel, target and LUN; PCIController is the PCI function the guest found the
// disk (or its SCSI controller) at, as the guest numbers PCI buses.
type FSDisk struct {
	PCIController *PCIAddress `json:"pci-controller,omitempty"`
	BusType       string      `json:"bus-type"`
	Bus           int         `json:"bus"`
	Target        int         `json:"target"`
	Unit          int         `json:"unit"`
	Dev           string      `json:"dev,omitempty"`
	Serial        string      `json:"serial,omitempty"`
}

// PCIAddress is a guest PCI address (GuestPCIAddress).
type PCIAddress struct {
	Domain   int `json:"domain"`
	Bus      int `json:"bus"`
	Slot     int `json:"slot"`
	Function int `json:"function"`
}

// ExecStatus is guest-exec-status's reply with out-data and err-data decoded.
type ExecStatus struct {
	Exited       bool
	ExitCode     int // valid when Exited and Signal == 0
	Signal       int // the signal that ended the process, 0 if none
	Stdout       []byte
	Stderr       []byte
	OutTruncated bool
	ErrTruncated bool
}
