package qemu

import (
	"context"
	"fmt"
	"regexp"
)

// TLSEndpoint is the side of a TLS connection a tls-creds-x509 object is for.
type TLSEndpoint string

// TLS endpoints. A migration target (and an NBD server) is the server, a migration source
// (and an NBD client) the client.
const (
	TLSServer TLSEndpoint = "server"
	TLSClient TLSEndpoint = "client"
)

// tlsIDRe is QEMU's id_wellformed alphabet, bounded: vmlet's own ids (with '_') are allowed
// here because the launcher names its creds objects that way; a collision with another
// object is refused by QEMU (duplicate ID), never mistaken for it.
var (
	tlsIDRe   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,63}$`)
	tlsHostRe = regexp.MustCompile(`^[A-Za-z0-9.:-]{1,253}$`) // a DNS name or an IP literal
)

// AddTLSCreds creates the TLS credentials object id from the x509 creds folder dir (the files
// pki.WriteQEMUCreds writes: ca-cert.pem, and server-cert.pem/server-key.pem for TLSServer or
// client-cert.pem/client-key.pem for TLSClient), with verify-peer on: a server demands a client
// certificate signed by the folder's CA, and a client checks the server's certificate against
// that CA and the hostname (MigrationParams.TLSHostname). QEMU reads the files now; an object
// this method added before under the same id is deleted first, so calling it again picks up
// renewed certificates. Use the id as MigrationParams.TLSCreds (or for an NBD server/client).
//
// QMP: object-add qom-type=tls-creds-x509 (equivalent: -object
// tls-creds-x509,id=ID,dir=DIR,endpoint=server,verify-peer=on).
func (vm *VM) AddTLSCreds(ctx context.Context, id, dir string, endpoint TLSEndpoint) error {
	if !tlsIDRe.MatchString(id) {
		return fmt.Errorf("add tls creds: %w", specErr("id", id, "must be 1-64 of [A-Za-z0-9._-] starting with a letter"))
	}
	if err := checkPath("dir", dir); err != nil {
		return fmt.Errorf("add tls creds %s: %w", id, err)
	}
	if endpoint != TLSServer && endpoint != TLSClient {
		return fmt.Errorf("add tls creds %s: %w", id, specErr("endpoint", string(endpoint), `must be "server" or "client"`))
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	if vm.hasTLSCreds(id) {
		if err := vm.removeTLSCreds(ctx, id); err != nil {
			return fmt.Errorf("add tls creds %s: replace: %w", id, err)
		}
	}
	args := map[string]any{
		"qom-type":    "tls-creds-x509",
		"id":          id,
		"dir":         dir,
		"endpoint":    string(endpoint),
		"verify-peer": true,
	}
	if err := vm.execute(ctx, "object-add", args, nil); err != nil {
		return fmt.Errorf("add tls creds %s: %w", id, err)
	}
	vm.mu.Lock()
	if vm.tlsCreds == nil {
		vm.tlsCreds = map[string]bool{}
	}
	vm.tlsCreds[id] = true
	vm.mu.Unlock()
	return nil
}

// RemoveTLSCreds deletes a credentials object AddTLSCreds created; ErrUnknownDevice if there
// is none with this id. A migration that uses it keeps its own reference until it ends.
// QMP: object-del.
func (vm *VM) RemoveTLSCreds(ctx context.Context, id string) error {
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	if !vm.hasTLSCreds(id) {
		return fmt.Errorf("remove tls creds %s: %w", id, ErrUnknownDevice)
	}
	if err := vm.removeTLSCreds(ctx, id); err != nil {
		return fmt.Errorf("remove tls creds %s: %w", id, err)
	}
	return nil
}

func (vm *VM) hasTLSCreds(id string) bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.tlsCreds[id]
}

func (vm *VM) removeTLSCreds(ctx context.Context, id string) error {
	if err := vm.execute(ctx, "object-del", map[string]any{"id": id}, nil); err != nil {
		return err
	}
	vm.mu.Lock()
	delete(vm.tlsCreds, id)
	vm.mu.Unlock()
	return nil
}

// tlsParams adds the TLS migration parameters of p to args (see MigrationParams).
func (p MigrationParams) tlsParams(args map[string]any) error {
	if p.ClearTLS {
		if p.TLSCreds != "" || p.TLSHostname != "" {
			return specErr("tlsCreds", p.TLSCreds, "ClearTLS and TLS parameters together")
		}
		args["tls-creds"] = ""
		args["tls-hostname"] = ""
		return nil
	}
	if p.TLSCreds != "" {
		if !tlsIDRe.MatchString(p.TLSCreds) {
			return specErr("tlsCreds", p.TLSCreds, "must be an id AddTLSCreds accepts")
		}
		args["tls-creds"] = p.TLSCreds
	}
	if p.TLSHostname != "" {
		if !tlsHostRe.MatchString(p.TLSHostname) {
			return specErr("tlsHostname", p.TLSHostname, "must be a DNS name or an IP address")
		}
		args["tls-hostname"] = p.TLSHostname
	}
	return nil
}
