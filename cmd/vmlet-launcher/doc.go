// Command vmlet-launcher is the per-VM launcher: it owns one QEMU process through the qemu
// driver and serves the launcher API (qemu/launcher/api/v1) on <run dir>/launcher.sock.
// Wiring only (flags, signals, logging); the runtime is package qemu/launcher. It links no
// k8s.io package (hack/check-imports.sh).
//
//	vmlet-launcher --run-dir DIR [--name NAME] [--grace-period 30s] [--log-level info]
//	               [--qemu PATH] [--agent-ping-interval 5s] [--agent-retry-max 5s]
//
// SIGTERM or SIGINT shuts the VM down gracefully (ACPI power button, then quit after the grace
// period, then SIGKILL); $VMLET_GRACE_PERIOD sets the default grace period. The exit status
// tells how the VM ended: 0 the guest powered off, migrated away, or there was no VM; 1 the
// launcher failed (the log names the failed startup step); 2 bad flags; 3 the VM was stopped by
// force (grace period over, or the Kill RPC); 4 QEMU died without being asked to (see the
// launcher package documentation). Logs go to standard error; the process umask is 077 and
// the Go heap target is GOGC=25 unless $GOGC says otherwise, and it runs Go code on one thread
// at a time (GOMAXPROCS=1) unless $GOMAXPROCS says otherwise. It needs no cgo: build it with
// CGO_ENABLED=0 for a static binary (≈1.3 MiB less RSS per launcher).
package main
