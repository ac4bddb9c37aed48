// Package launcher is the per-VM launcher runtime (KubeVirt's virt-launcher without libvirt):
// its command server and versioned gRPC API (api/v1), the typed client the node agent uses
// (Dial), the event stream, the guest agent poller, and the QMP log and debug proxy. It drives
// QEMU only through package qemu; it links no Kubernetes package.
//
// # Lifecycle
//
// One vmlet-launcher process runs per VM, with a run dir of its own (see Paths). Run performs
// the startup steps (prepare-dirs, open-qmp-log, listen-api, serve-api, listen-taps, mark-ready); a failing
// step is reported by name (*StepError). The API socket is bound as launcher.sock.starting and
// renamed to launcher.sock once it takes commands: the agent tells "starting" from "ready" by
// the name. Every socket is 0600 (the process umask is 077).
//
// Sync (or PrepareMigrationTarget) starts the one domain, also as named steps (check-spec,
// open-taps, take-disk-files, start-qemu, watch-events, serve-qmp-debug, poll-agent, publish)
// that undo themselves on failure. Sync is idempotent: the spec of the running domain again is
// a no-op, another spec is ErrDomainExists (devices change through the hotplug RPCs). When
// QEMU exits, for whatever reason, the launcher emits the final event, ends the API streams,
// removes its sockets and exits; logs stay.
//
// # Exit status
//
// SIGTERM (or Run's context ending) presses the ACPI power button, waits up to the grace period
// (--grace-period, $VMLET_GRACE_PERIOD, default 30 s; the Shutdown RPC takes its own), then
// tells QEMU to quit, then kills it. The exit status says how the VM ended:
//
//	0 ExitOK        the guest powered off (also within the grace period after SIGTERM or
//	                Shutdown), the domain migrated away, or no domain was ever started
//	1 ExitError     the launcher failed (a startup step, the API server)
//	2 ExitUsage     bad flags
//	3 ExitForced    the launcher stopped QEMU by force: grace period over (quit or kill),
//	                or the Kill RPC
//	4 ExitQEMUDied  QEMU ended without the launcher asking: crash, killed from outside,
//	                error exit, or "quit" typed on qmp-debug.sock
//	5 ExitGuestPanicked  the guest panicked and told QEMU through its panic device
//	                (qemu.Spec.Panic); QEMU exited at once (libvirt's on_crash destroy)
//
// A pod's terminationGracePeriodSeconds must exceed the launcher's grace period plus ≈45 s
// (quit, then SIGKILL and reaping).
//
// # State and events
//
// The domain state (GetDomain) is level-based: QMP events (STOP, RESUME, SHUTDOWN, RESET,
// GUEST_PANICKED, MIGRATION, ...) only trigger a query-status, so a late or stale event can
// never set a wrong state, and changes made behind the API's back (qmp-debug.sock) are noticed
// like any other. Each change is one event; events are numbered 1, 2, 3, ... without gaps and
// time-stamped. WatchEvents replays the retained events (the newest 1024) after after_seq, then
// streams; GetDomain's last_event_seq is the number to resume from (EVENTS_LOST if too old).
// The guest agent is polled (QGA has no "agent started" event) with a back-off that doubles up
// to a cap; its connected state is in GetDomain and in events. The agent answers one command
// at a time, so no RPC holds it for long: GuestExec is guest-exec (qemu-ga runs the process
// asynchronously) then short guest-exec-status polls, and pings and other guest RPCs go
// between them. The agent counts as lost only when a command sent to it went unanswered past
// its deadline, which starts when it is sent; a command that could not be sent because others
// held the channel past the wait-in-line bound is AGENT_BUSY, no verdict on the agent. A
// process outliving GuestExec's timeout is EXEC_TIMEOUT (metadata "pid") and keeps running.
// While the agent answers, the launcher also reads the guest's OS, host name and interfaces
// (at connect and every 10 s, KubeVirt's agent poller interval) into GetDomain's guest_info;
// a changed answer is an agent event with guest_info_changed, so the node agent needs no
// polling of its own.
//
// # NICs: tap names, and tap files handed over
//
// gRPC cannot carry file descriptors, so a NIC names an existing tap device and the network
// namespace it lives in (a path such as /var/run/netns/NAME or /proc/PID/ns/net; empty: the
// launcher's own). The node agent, which stays root, opens the tap's queues itself and hands
// them over before the Sync or HotplugNIC that uses them (HandOverTap: SCM_RIGHTS on
// sockets/taps.sock, one SOCK_SEQPACKET message per tap, from root or the launcher's own user
// only; each file is checked with TUNGETIFF), together with a /proc/net/dev opened inside the
// tap's namespace for the tap's counters. A launcher running as an unprivileged user (107, no
// capabilities) can neither open /dev/net/tun nor enter a namespace, so this is how it gets
// taps — as KubeVirt's virt-handler prepares the tap for its non-root virt-launcher. A launcher
// running as root that was handed nothing opens the tap itself (TUNSETIFF on /dev/net/tun, in
// that namespace on a throw-away OS thread). Either way the launcher passes the fds to QEMU
// with getfd, so QEMU never needs CAP_NET_ADMIN or /dev/net/tun. A missing tap is
// ErrTapNotFound (the launcher never creates one).
//
// # Disks: paths, and image files handed over
//
// A disk names its image by path, which QEMU opens. In cluster mode the launcher's container
// has its mounts fixed when its pod is made, so a volume attached later (a hot-plugged
// PersistentVolumeClaim) is not in its file system. The node agent, root on the host, then
// opens the image file or block device itself and hands the open files over before the
// HotplugDisk, or the Sync or PrepareMigrationTarget, that uses the disk (HandOverDisk:
// SCM_RIGHTS on sockets/taps.sock, one message per disk id, 1 to qemu.MaxDiskFiles files, each
// checked with fstat to be a regular file or a block device; an O_RDWR file for a writable
// disk, an O_RDONLY one for a read-only disk). The launcher pools them by disk id (a later
// hand-over of the same id replaces and closes the earlier files) until the start or hotplug
// of that disk takes them as qemu.Disk.Files; it closes its copies once QEMU has its own
// (add-fd into an fdset per disk, opened as /dev/fdset/N; remove-fd after the unplug), and a
// start or hotplug that fails needs a new hand-over. The path still names the image (logs,
// live_spec). A disk with no handed files is opened by its path, as before; SATA disks cannot
// be given as files (they go on QEMU's command line).
//
// # DHCP: the VM's servers live here
//
// The guest's DHCP (DHCPv4; with IPv6 DHCPv6 and router advertisements) is served by its
// launcher, not by the node agent, so an agent restart or upgrade never leaves a guest
// without its DHCP server (KubeVirt's virt-launcher serves its guest's DHCP too). An
// unprivileged launcher can neither bind ports 67/547 nor open a raw ICMPv6 socket, so the
// agent binds them as root in the pod's netns (package network/dhcp) and hands them over on
// sockets/taps.sock with the interface's lease plan, a plain struct (HandOverDHCP; StopDHCP
// when the NIC is removed). The launcher serves them until it exits; the leases the guest is
// acknowledged are LeaseEvents and part of GetDomain (leases, dhcp_interfaces), so an agent
// that restarted learns them, and what it still has to hand over, from the launcher.
//
// # Privileges
//
// The launcher needs no privilege: it runs as the node's launcher user (controllers/process
// User, launcher pods' runAsUser) with no capabilities and no_new_privs, owns its run dir, and
// QEMU inherits all of it. QEMU also runs under its own seccomp filter (qemu.Sandbox: -sandbox
// on with obsolete, elevateprivileges, spawn and resourcecontrol denied); nothing the launcher
// asks of QEMU needs a fork or exec.
//
// # Serial console
//
// sockets/console.sock is QEMU's serial chardev (one client at a time: `vmctl console`); the
// output is also written to logs/serial.log whether or not a client is attached.
//
// # Display
//
// A domain with graphics has a VGA display and a VNC server without a network listener: the
// launcher binds sockets/vnc.sock (0600) and hands each client that connects to QEMU (getfd +
// add_client); a new client takes the display over and the previous one is disconnected.
// Screenshot is QMP screendump (PNG) into a file of the run dir, read back and removed.
//
// # QMP debugging for humans
//
// Every line on the launcher's QMP connection (commands, replies, events, the greeting) is
// written with a timestamp to logs/qmp.log, rotated at 4 MiB to qmp.log.1 … qmp.log.3:
//
//	2026-11-29T07:52:27.258117Z wire cmd {"execute":"stop","id":"42"}
//	2026-11-29T07:52:27.259003Z wire event {"event":"STOP","timestamp":{...}}
//	2026-11-29T07:52:27.259120Z wire reply {"return":{},"id":"42"}
//
// Lines with origin "debug" are what a qmp-debug.sock client typed (its wire line follows).
// The QMPLog RPC (`vmctl qmp-log [-f]`) streams the same entries from memory; the QMP RPC
// (`vmctl qmp '{"execute":"query-status"}'`) sends one raw command.
//
// While QEMU runs, sockets/qmp-debug.sock speaks QMP itself: a greeting with QEMU's version,
// qmp_capabilities negotiation, then every command is proxied through the launcher's own
// monitor connection (QEMU serves one client) and every event is forwarded. Any number of
// clients may attach, concurrently with the API:
//
//	socat - UNIX-CONNECT:/run/vmlet/<id>/sockets/qmp-debug.sock
//	{"execute":"qmp_capabilities"}
//	{"execute":"query-status"}
//
// or qmp-shell /run/vmlet/<id>/sockets/qmp-debug.sock. The launcher stays in control: a stop
// typed there shows up as a PAUSED event and in GetDomain. Not offered: out-of-band execution,
// and fd passing (getfd/add-fd). Do not hotplug through it: the launcher's device records
// (GetDomain, live_spec, migration) would not know. "quit" there ends the VM like a crash
// would (exit status 4).
//
// # Migration
//
// The target launcher gets PrepareMigrationTarget with the source's GetDomain().live_spec (the
// running devices, hotplugged ones included, every slot, machine type and CPU model pinned) and
// the same MigrationOptions; it starts QEMU with -incoming defer and listens (default: a unix
// socket in its run dir; tcp: URIs work too). The source gets Migrate(uri, options), then both
// get FinalizeMigration: the target waits for completion with the guest running, the source
// waits for completion and quits QEMU (exit 0, reason "migrated"). NICs need taps of their own
// on the target (a tap cannot be attached twice).
//
// Node-local writable disks (containerDisk overlays, emptyDisks) are copied with QEMU block
// jobs, like libvirt's non-shared-storage migration. The target's live_spec names fresh files
// of the same size (overlays over the same backing image) and PrepareMigrationTarget lists
// them in receive_disks: the target serves them over NBD (nbd_uri, a unix socket in its run
// dir by default). Migrate with nbd_uri and mirror_disks (shallow for an overlay) mirrors each
// disk into the target (write-blocking: guest writes reach both sides) and starts the memory
// migration once all mirrors are ready; GetMigrationStatus.disks shows their progress. The
// target's FinalizeMigration then returns at completion with the guest still paused; the
// source's FinalizeMigration ends the mirrors (block-job-cancel of ready mirrors: the target
// holds the final state) and quits QEMU; only after that does the agent call the target's
// ResumeMigrationTarget, which stops the NBD server and resumes the guest. CancelMigration
// ends the mirrors too: the source keeps running on its own, unchanged disks. Post-copy is
// refused with disks (the target could not run before the mirrors ended).
//
// # Privileges
//
// In local mode the launcher is a child of the node agent (its own session, in a cgroup with a
// device filter); in cluster mode it is a pod's main process. QEMU runs as the launcher's own
// user: package qemu has no option to start QEMU as another user, so a root launcher means a
// root QEMU. The launcher itself needs no privilege for a VM without NICs (tested: it runs as
// nobody with TCG). What needs more:
//   - NICs: read-write /dev/net/tun, and CAP_NET_ADMIN unless the agent made the tap with the
//     launcher's uid as owner; CAP_SYS_ADMIN to enter another network namespace (none in
//     cluster mode: the launcher lives in the pod's namespace, so netns stays empty);
//   - KVM: /dev/kvm (the device filter allows it); post-copy: userfaultfd (root or
//     vm.unprivileged_userfaultfd=1);
//   - its run dir, the disk images and boot files, readable (and writable) by its user.
//
// So the cheap least-privilege setup is to run the launcher (and with it QEMU) as an
// unprivileged user with taps owned by that user, not to drop privileges inside it.
package launcher
