package launcher

import (
	"context"
	"fmt"
	"strings"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// The launcher's TLS credentials objects in QEMU. They contain '_', which no user id can, and
// differ by endpoint: a completed target (server creds) later migrates on as a source. The NBD
// disk copy uses the same objects (nbd-server-start tls-creds on the target; blockdev-add nbd
// tls-creds + tls-hostname on the source), so setupMigrationTLS runs before either.
const (
	tlsServerCredsID = "mig_tls_server"
	tlsClientCredsID = "mig_tls_client"
)

// setupMigrationTLS prepares one side of a migration (before migrate-incoming on the target,
// TLSServer; before migrate on the source, TLSClient): with o.tls_creds_dir it loads the folder
// into a tls-creds-x509 object (re-reading it on every call, so renewed certificates count) and
// sets tls-creds, plus tls-hostname on the source; without it, TLS is turned off (a source
// whose earlier migration used TLS). uri is the migration uri (the source needs a hostname
// when it names no host).
func setupMigrationTLS(ctx context.Context, vm *qemu.VM, o *pb.MigrationOptions, endpoint qemu.TLSEndpoint, uri string) error {
	dir, host := o.GetTlsCredsDir(), o.GetTlsHostname()
	if dir == "" {
		if host != "" {
			return fmt.Errorf("migration tls: %w: tls_hostname without tls_creds_dir", ErrInvalidRequest)
		}
		return vm.SetMigrationParams(ctx, qemu.MigrationParams{ClearTLS: true})
	}
	id := tlsServerCredsID
	p := qemu.MigrationParams{TLSCreds: id}
	if endpoint == qemu.TLSClient {
		if host == "" && !strings.HasPrefix(uri, "tcp:") {
			return fmt.Errorf("migration tls: %w: tls_hostname is required for uri %q (it names no host to check the target's certificate against)", ErrInvalidRequest, uri)
		}
		id = tlsClientCredsID
		p = qemu.MigrationParams{TLSCreds: id, TLSHostname: host}
	}
	if err := vm.AddTLSCreds(ctx, id, dir, endpoint); err != nil {
		return fmt.Errorf("migration tls: %w", err)
	}
	if err := vm.SetMigrationParams(ctx, p); err != nil {
		return fmt.Errorf("migration tls: %w", err)
	}
	return nil
}
