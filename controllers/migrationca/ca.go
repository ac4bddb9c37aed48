package migrationca

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/pki"
)

// Where the CA lives: Secret SecretName (type kubernetes.io/tls) in Namespace.
const (
	Namespace  = "vmlet-system"
	SecretName = "vmlet-migration-ca"
)

// EnsureCA returns the cluster's migration CA, making it (and its namespace, if missing) when
// there is none.
// Idempotent; several controllers racing agree on the first one created.
//
// Equivalent to: kubectl -n vmlet-system create secret tls vmlet-migration-ca --cert=ca.pem --key=ca-key.pem
func EnsureCA(ctx context.Context, c client.Client) (*pki.CA, error) {
	key := client.ObjectKey{Namespace: Namespace, Name: SecretName}
	sec := &corev1.Secret{}
	err := c.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		ca, nerr := pki.NewCA(pki.CAOptions{CommonName: "vmlet migration CA"})
		if nerr != nil {
			return nil, fmt.Errorf("migration ca: %w", nerr)
		}
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: SecretName}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM}}
		err = c.Create(ctx, sec)
		if apierrors.IsNotFound(err) { // no namespace yet (deployments make it; tests may not)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
			if nerr := c.Create(ctx, ns); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
				return nil, fmt.Errorf("migration ca: namespace: %w", nerr)
			}
			err = c.Create(ctx, sec)
		}
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, key, sec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("migration ca secret %s/%s: %w", Namespace, SecretName, err)
	}
	return parse(sec)
}

// ReadCA reads the cluster's migration CA (made by EnsureCA).
func ReadCA(ctx context.Context, c client.Reader) (*pki.CA, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: SecretName}, sec); err != nil {
		return nil, fmt.Errorf("migration ca secret %s/%s: %w", Namespace, SecretName, err)
	}
	return parse(sec)
}

func parse(sec *corev1.Secret) (*pki.CA, error) {
	ca, err := pki.ParseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("migration ca secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return ca, nil
}
