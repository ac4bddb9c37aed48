package qemu

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// MigrationCaps are migration capabilities. Both sides of a migration need the same ones.
// The "events" capability is always enabled: WaitMigration and WaitIncoming rely on it.
type MigrationCaps struct {
	AutoConverge bool // throttle the guest's vCPUs when it dirties memory faster than we send
	PostcopyRAM  bool // allow StartPostcopy (needs userfaultfd on the target)
	Multifd      bool // several parallel channels (MigrationParams.MultifdChannels)
}

// SetMigrationCaps sets the capabilities (all of them, on or off).
//
// AutoConverge is refused (ErrUnsafe) where a TCG live migration loses guest writes
// (LiveMigrationLosesWrites: QEMU before 9.0 under TCG): on QEMU 7.2 a pre-copy migration that
// throttled the guest's vCPUs corrupted the guest on the target in 7 of 15 runs here (kernel
// "list_add corruption" BUG or a hung guest right after switchover), throttling making the
// many dirty-bitmap syncs that lose writes there. On QEMU 10.0 the same guest (rewriting 8 MiB
// and appending numbered lines, checked after every hop) migrated 6 hops at 8 MiB/s, throttled
// through 24–28 passes each, without a lost write. KVM hosts are not affected by this rule.
//
// QMP: migrate-set-capabilities.
func (vm *VM) SetMigrationCaps(ctx context.Context, c MigrationCaps) error {
	if c.AutoConverge && LiveMigrationLosesWrites(string(vm.resolved.Accel), vm.version) {
		return fmt.Errorf("set migration capabilities: auto-converge under tcg on qemu %s (before 9.0): %w", vm.version, ErrUnsafe)
	}
	cap := func(name string, on bool) map[string]any { return map[string]any{"capability": name, "state": on} }
	args := map[string]any{"capabilities": []map[string]any{
		cap("events", true),
		cap("auto-converge", c.AutoConverge),
		cap("postcopy-ram", c.PostcopyRAM),
		cap("multifd", c.Multifd),
	}}
	return vm.execute(ctx, "migrate-set-capabilities", args, nil)
}

// enableMigrationEvents turns on the "events" capability alone (the others keep their state):
// WaitMigration and WaitIncoming follow MIGRATION events. QMP: migrate-set-capabilities.
func (vm *VM) enableMigrationEvents(ctx context.Context) error {
	args := map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}
	return vm.execute(ctx, "migrate-set-capabilities", args, nil)
}

// MigrationParams are migration parameters; zero fields leave QEMU's current value.
type MigrationParams struct {
	MaxBandwidth    int64         // bytes per second (QEMU's default is 128 MiB/s)
	DowntimeLimit   time.Duration // longest acceptable pause at switchover (millisecond steps)
	MultifdChannels int           // with MigrationCaps.Multifd; both sides must agree
	// CPUThrottleInitial and CPUThrottleIncrement (percent) tune auto-converge.
	CPUThrottleInitial   int
	CPUThrottleIncrement int

	// TLSCreds is the id of a tls-creds-x509 object (AddTLSCreds) that encrypts the stream:
	// endpoint server on the target (set before MigrateIncoming), client on the source (before
	// Migrate). Both sides must agree: a TLS source and a plaintext target (or the reverse)
	// fail the migration and the source keeps running. QMP parameter tls-creds.
	TLSCreds string
	// TLSHostname is the name the source checks the target's certificate against (one of its
	// SAN names or addresses). Required with TLSCreds when the URI has no host (unix: or fd:),
	// as between nodes, where the agent relays QEMU's unix socket over TCP; with a tcp: URI it
	// defaults to the URI's host. Ignored on the target. QMP parameter tls-hostname.
	TLSHostname string
	// ClearTLS turns TLS off again (tls-creds and tls-hostname set to ""), for a VM whose
	// earlier migration used TLS. Not with TLSCreds or TLSHostname.
	ClearTLS bool
}

// SetMigrationParams sets the non-zero parameters. QMP: migrate-set-parameters.
func (vm *VM) SetMigrationParams(ctx context.Context, p MigrationParams) error {
	args := map[string]any{}
	if p.MaxBandwidth > 0 {
		args["max-bandwidth"] = p.MaxBandwidth
	}
	if p.DowntimeLimit > 0 {
		args["downtime-limit"] = max(p.DowntimeLimit.Milliseconds(), 1)
	}
	if p.MultifdChannels > 0 {
		args["multifd-channels"] = p.MultifdChannels
	}
	if p.CPUThrottleInitial > 0 {
		args["cpu-throttle-initial"] = p.CPUThrottleInitial
	}
	if p.CPUThrottleIncrement > 0 {
		args["cpu-throttle-increment"] = p.CPUThrottleIncrement
	}
	if err := p.tlsParams(args); err != nil {
		return fmt.Errorf("set migration parameters: %w", err)
	}
	if len(args) == 0 {
		return nil
	}
	return vm.execute(ctx, "migrate-set-parameters", args, nil)
}

// MigrateIncoming makes a target started with Spec.Incoming listen for the migration stream
// at uri ("tcp:127.0.0.1:0", "unix:/path"; MigrateIncomingFD for fds). With tcp port 0,
// MigrationStatus().SocketAddresses says which port QEMU bound. Follow it with WaitIncoming.
// A unix socket QEMU creates for this is removed when the VM exits.
//
// The target was started with -S, so it does not run the guest by itself after the migration:
// WaitIncoming resumes it. (A cont before the migration would set QEMU's autostart, but in
// QEMU 7.2 it also activates the block devices while the source still writes to them.)
//
// QMP: query-status, migrate-set-capabilities (events), migrate-incoming.
func (vm *VM) MigrateIncoming(ctx context.Context, uri string) error {
	st, err := vm.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate incoming: %w", err)
	}
	if st.Status != "inmigrate" {
		return fmt.Errorf("migrate incoming: %w: status %s (start the target with Spec.Incoming)", ErrWrongState, st.Status)
	}
	if err := vm.enableMigrationEvents(ctx); err != nil {
		return fmt.Errorf("migrate incoming: %w", err)
	}
	if err := vm.execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil); err != nil {
		return fmt.Errorf("migrate incoming: %w", err)
	}
	if path, ok := strings.CutPrefix(uri, "unix:"); ok {
		// QEMU does not remove its listening socket when the incoming migration fails.
		vm.mu.Lock()
		vm.files = append(vm.files, path)
		vm.mu.Unlock()
	}
	return nil
}

// MigrateIncomingFD is MigrateIncoming over a connected socket (one end of a socketpair or
// an accepted connection), handed over with getfd. QMP: getfd, migrate-incoming fd:NAME.
func (vm *VM) MigrateIncomingFD(ctx context.Context, f *os.File) error {
	if err := vm.getfd(ctx, migrateFDName, f); err != nil {
		return fmt.Errorf("migrate incoming: %w", err)
	}
	return vm.MigrateIncoming(ctx, "fd:"+migrateFDName)
}

const migrateFDName = "migrate_fd"

// Migrate starts an outgoing migration to uri ("tcp:127.0.0.1:PORT", "unix:/path") and
// returns once QEMU accepted it; WaitMigration follows it. QMP: migrate-set-capabilities
// (events), migrate.
func (vm *VM) Migrate(ctx context.Context, uri string) error {
	if err := vm.enableMigrationEvents(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := vm.execute(ctx, "migrate", map[string]any{"uri": uri}, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// MigrateFD starts an outgoing migration over a connected socket. QMP: getfd, migrate fd:NAME.
func (vm *VM) MigrateFD(ctx context.Context, f *os.File) error {
	if err := vm.getfd(ctx, migrateFDName, f); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return vm.Migrate(ctx, "fd:"+migrateFDName)
}

// CancelMigration cancels the outgoing migration; the source keeps running (WaitMigration
// then reports status "cancelled"). QMP: migrate_cancel.
func (vm *VM) CancelMigration(ctx context.Context) error {
	return vm.execute(ctx, "migrate_cancel", nil, nil)
}

// StartPostcopy switches a running pre-copy migration (with MigrationCaps.PostcopyRAM on both
// sides) to post-copy: the guest moves to the target at once and pulls the remaining pages on
// demand. QMP: migrate-start-postcopy.
func (vm *VM) StartPostcopy(ctx context.Context) error {
	return vm.execute(ctx, "migrate-start-postcopy", nil, nil)
}
