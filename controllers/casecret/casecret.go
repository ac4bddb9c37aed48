package casecret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/pki"
)

// Ensure returns the CA kept in Secret key, making it (a new CA named commonName, and the
// Secret's namespace if missing) when there is none. Idempotent; of several callers racing,
// all end up with the first one created.
//
// Equivalent to: kubectl -n NS create secret tls NAME --cert=ca.pem --key=ca-key.pem
func Ensure(ctx context.Context, c client.Client, key client.ObjectKey, commonName string) (*pki.CA, error) {
	sec := &corev1.Secret{}
	err := c.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		ca, nerr := pki.NewCA(pki.CAOptions{CommonName: commonName})
		if nerr != nil {
			return nil, fmt.Errorf("ca secret %s: %w", key, nerr)
		}
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM}}
		err = c.Create(ctx, sec)
		if apierrors.IsNotFound(err) { // no namespace yet (deployments make it; tests may not)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}
			if nerr := c.Create(ctx, ns); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
				return nil, fmt.Errorf("ca secret %s: namespace: %w", key, nerr)
			}
			err = c.Create(ctx, sec)
		}
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, key, sec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ca secret %s: %w", key, err)
	}
	return parse(key, sec)
}

// Read reads the CA kept in Secret key (made by Ensure).
func Read(ctx context.Context, c client.Reader, key client.ObjectKey) (*pki.CA, error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("ca secret %s: %w", key, err)
	}
	return parse(key, sec)
}

func parse(key client.ObjectKey, sec *corev1.Secret) (*pki.CA, error) {
	ca, err := pki.ParseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("ca secret %s: %w", key, err)
	}
	return ca, nil
}
