package subresources

import (
	"context"
	"encoding/base64"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RegisterLocal makes kube-apiserver send the group to a server on this machine at port:
// the Service is of type ExternalName "localhost" (kube-apiserver's aggregator dials
// https://<externalName>:<APIService port> for those, with no kube-proxy or endpoints
// involved), and the APIService carries caPEM. Idempotent (server-side apply).
func RegisterLocal(ctx context.Context, c client.Client, caPEM []byte, port int32) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ServiceNamespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register subresources api: %w", err)
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: ServiceName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromInt32(port)}}},
	}
	if err := apply(ctx, c, svc, "vmlet"); err != nil {
		return fmt.Errorf("register subresources api: service: %w", err)
	}
	return applyAPIService(ctx, c, caPEM, port)
}

// apply server-side applies obj (typed or unstructured) as field manager owner.
func apply(ctx context.Context, c client.Client, obj any, owner string) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), client.FieldOwner(owner), client.ForceOwnership)
}

// applyAPIService writes the APIService v1alpha1.subresources.vmlet.dev.
func applyAPIService(ctx context.Context, c client.Client, caPEM []byte, port int32) error {
	as := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group": Group, "version": Version,
			"service":              map[string]any{"namespace": ServiceNamespace, "name": ServiceName, "port": int64(port)},
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(as), client.FieldOwner("vmlet"), client.ForceOwnership); err != nil {
		return fmt.Errorf("register subresources api: apiservice: %w", err)
	}
	return nil
}
