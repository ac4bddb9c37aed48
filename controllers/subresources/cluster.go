package subresources

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/casecret"
	"github.com/vmlet/vmlet/pki"
)

// In a cluster the CA lives in Secret ServiceNamespace/CAName (its key never leaves the
// controller's namespace); its certificate is published in ConfigMap ServiceNamespace/CAName,
// key CAConfigKey, where node agents read it to accept only the aggregated server's client
// certificate. Node agents do not get certificates from this CA: each makes its own key and
// self-signed certificate and publishes the certificate's SHA-256 on its Node
// (controllers.AnnotStreamsCertSHA256), which the aggregated server pins.
const (
	CAName      = "vmlet-subresources-ca"
	CAConfigKey = "ca.crt"
	// ClusterPort is the APIService's port (the Service's; its targetPort is the server's).
	ClusterPort = 443
)

// EnsureClusterCA reads the CA from its Secret, creating it when missing (a replica that
// loses the race reads the winner's), and publishes its certificate in the ConfigMap.
func EnsureClusterCA(ctx context.Context, c client.Client) (*pki.CA, error) {
	ca, err := casecret.Ensure(ctx, c, client.ObjectKey{Namespace: ServiceNamespace, Name: CAName}, "vmlet subresources CA")
	if err != nil {
		return nil, fmt.Errorf("subresources ca: %w", err)
	}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: CAName}, Data: map[string]string{CAConfigKey: string(ca.CertPEM)}}
	if err := apply(ctx, c, cm, "vmlet-controller"); err != nil {
		return nil, fmt.Errorf("publish subresources ca: %w", err)
	}
	return ca, nil
}

// RegisterCluster writes the APIService with caPEM, pointing at the Service of
// config/controller (port ClusterPort).
func RegisterCluster(ctx context.Context, c client.Client, caPEM []byte) error {
	return applyAPIService(ctx, c, caPEM, ClusterPort)
}

// ReadClusterCA is the published CA certificate (what a node agent trusts).
func ReadClusterCA(ctx context.Context, c client.Reader) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ServiceNamespace, Name: CAName}, cm); err != nil {
		return nil, fmt.Errorf("read subresources ca: %w", err)
	}
	if cm.Data[CAConfigKey] == "" {
		return nil, errors.New("read subresources ca: empty")
	}
	return []byte(cm.Data[CAConfigKey]), nil
}

// CertSHA256 is the pin of a certificate: hex SHA-256 of its DER.
func CertSHA256(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}
