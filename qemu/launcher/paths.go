package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmlet/vmlet/qemu"
)

// Names inside the run dir. The node agent watches ReadySocket appear (controllers/process
// uses the same names): the command socket is bound under StartingSocket and renamed to
// ReadySocket only once it takes commands.
const (
	ReadySocket    = "launcher.sock"
	StartingSocket = "launcher.sock.starting"
	// EndRecord is where the launcher writes how its domain ended ({"code", "reason",
	// "detail"}, JSON) before it exits; the agent shows the detail with the VMI's end.
	EndRecord = "launcher.end"
)

// Paths is the run dir layout. Everything the launcher creates lives under Root:
//
//	launcher.sock(.starting)   the API (gRPC), 0600
//	launcher.end               how the domain ended (written last, 0600)
//	disks/ cloud-init/ hotplug/ volumes the agent prepares for this VM (left alone)
//	sockets/qmp.sock           QEMU's monitor; only the launcher connects
//	sockets/qmp-debug.sock     QMP for humans, proxied through the launcher (while QEMU runs)
//	sockets/console.sock       the serial console (QEMU serves it, one client at a time)
//	sockets/qga.sock           the guest agent channel; only the launcher connects
//	sockets/vnc.sock           the display's VNC server (graphics), one client at a time: the
//	                           launcher accepts and hands each client to QEMU; a new one takes over
//	screendump-*.png           a Screenshot being taken (QEMU writes it, the launcher reads and removes it)
//	sockets/migration.sock     default incoming migration socket of a target
//	sockets/taps.sock          the agent hands tap fds, DHCP sockets and disk image files over here (SOCK_SEQPACKET, SCM_RIGHTS)
//	logs/qmp.log[.1..]         every QMP line with a timestamp, size-capped and rotated
//	logs/serial.log            the serial console output
//	logs/qemu.log              QEMU's standard error
//
// Sockets are removed when the launcher exits; logs stay for humans.
type Paths struct {
	Root string
}

// Dirs are the folders created at startup, 0700.
func (p Paths) Dirs() []string {
	return []string{p.Root, p.Disks(), p.CloudInit(), p.Hotplug(), p.Sockets(), p.Logs()}
}

// Disks is the folder of disk volumes the agent prepares for this VM.
func (p Paths) Disks() string { return filepath.Join(p.Root, "disks") }

// CloudInit is the folder of cloud-init volumes the agent prepares for this VM.
func (p Paths) CloudInit() string { return filepath.Join(p.Root, "cloud-init") }

// Hotplug is the folder of hotplugged volumes the agent prepares for this VM.
func (p Paths) Hotplug() string { return filepath.Join(p.Root, "hotplug") }

// Sockets is the folder of the sockets QEMU and the launcher serve or connect to.
func (p Paths) Sockets() string { return filepath.Join(p.Root, "sockets") }

// Logs is the folder of the logs, which stay after the launcher exits.
func (p Paths) Logs() string { return filepath.Join(p.Root, "logs") }

// ReadySocket is the launcher's API socket once it takes commands.
func (p Paths) ReadySocket() string { return filepath.Join(p.Root, ReadySocket) }

// EndRecord is the record of how the domain ended.
func (p Paths) EndRecord() string { return filepath.Join(p.Root, EndRecord) }

// StartingSocket is where the launcher binds its API socket before renaming it to ReadySocket.
func (p Paths) StartingSocket() string { return filepath.Join(p.Root, StartingSocket) }

// QMPSocket is QEMU's monitor socket; only the launcher connects.
func (p Paths) QMPSocket() string { return filepath.Join(p.Sockets(), "qmp.sock") }

// TapSocket is where the node agent hands the launcher tap queue files it opened (SCM_RIGHTS;
// see HandOverTap): a launcher without CAP_NET_ADMIN cannot open /dev/net/tun itself. Bound
// DHCP sockets come the same way (HandOverDHCP).
func (p Paths) TapSocket() string { return filepath.Join(p.Sockets(), "taps.sock") }

// DebugSocket is the QMP socket for humans, proxied through the launcher.
func (p Paths) DebugSocket() string { return filepath.Join(p.Sockets(), "qmp-debug.sock") }

// ConsoleSocket is the serial console socket QEMU serves, one client at a time.
func (p Paths) ConsoleSocket() string { return filepath.Join(p.Sockets(), "console.sock") }

// AgentSocket is the guest agent channel; only the launcher connects.
func (p Paths) AgentSocket() string { return filepath.Join(p.Sockets(), "qga.sock") }

// VNCSocket is the display's VNC socket (RFB), served while a domain with graphics runs.
func (p Paths) VNCSocket() string { return filepath.Join(p.Sockets(), "vnc.sock") }

// MigrationSocket is the default incoming migration socket of a target.
func (p Paths) MigrationSocket() string {
	return filepath.Join(p.Sockets(), "migration.sock")
}

// NBDSocket is the default NBD server socket of a migration target that receives disks.
func (p Paths) NBDSocket() string { return filepath.Join(p.Sockets(), "nbd.sock") }

// QMPLog is the log of every QMP line with a timestamp, size-capped and rotated.
func (p Paths) QMPLog() string { return filepath.Join(p.Logs(), "qmp.log") }

// SerialLog is the serial console output.
func (p Paths) SerialLog() string { return filepath.Join(p.Logs(), "serial.log") }

// QEMULog is QEMU's standard error.
func (p Paths) QEMULog() string { return filepath.Join(p.Logs(), "qemu.log") }

// maxSunPath is sizeof(sockaddr_un.sun_path) minus the NUL.
const maxSunPath = 107

// check verifies the layout fits unix socket path limits and has no comma (QEMU's option
// syntax; the driver passes sockets as fds, but migration URIs carry the path).
func (p Paths) check() error {
	if !filepath.IsAbs(p.Root) {
		return fmt.Errorf("check run dir %q: %w: not absolute", p.Root, ErrInvalidConfig)
	}
	for _, s := range []string{p.StartingSocket(), p.DebugSocket(), p.MigrationSocket(), p.NBDSocket(), p.VNCSocket()} {
		if len(s) > maxSunPath {
			return fmt.Errorf("check run dir: %w: socket path %s is %d bytes, the limit is %d",
				ErrInvalidConfig, s, len(s), maxSunPath)
		}
	}
	return nil
}

// prepare creates the folders (0700; existing ones are chmodded) and removes an earlier
// launcher's end record. An existing folder must be a folder, not a symlink to one: every
// launcher's user could have planted it (the logs would go where it points).
func (p Paths) prepare() error {
	if err := os.Remove(p.EndRecord()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the last end record: %w", err)
	}
	for _, d := range p.Dirs() {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create dir: %w", err)
		}
		if fi, err := os.Lstat(d); err != nil {
			return fmt.Errorf("create dir: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("create dir %s: %w", d, qemu.ErrUnsafePath)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("chmod dir: %w", err)
		}
	}
	return nil
}
