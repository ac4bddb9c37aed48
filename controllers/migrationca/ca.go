package migrationca

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/casecret"
	"github.com/vmlet/vmlet/pki"
)

// Where the CA lives: Secret SecretName (type kubernetes.io/tls) in Namespace.
const (
	Namespace  = "vmlet-system"
	SecretName = "vmlet-migration-ca"
)

var key = client.ObjectKey{Namespace: Namespace, Name: SecretName}

// EnsureCA returns the cluster's migration CA, making it when there is none (casecret.Ensure).
func EnsureCA(ctx context.Context, c client.Client) (*pki.CA, error) {
	return casecret.Ensure(ctx, c, key, "vmlet migration CA")
}

// ReadCA reads the cluster's migration CA (made by EnsureCA).
func ReadCA(ctx context.Context, c client.Reader) (*pki.CA, error) {
	return casecret.Read(ctx, c, key)
}
