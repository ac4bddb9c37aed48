package evacuation

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Where kube-apiserver finds the eviction webhook in a cluster: Service WebhookService in
// WebhookNamespace, port 443 (config/controller), whose serving certificate names WebhookDNS.
const (
	WebhookNamespace  = "vmlet-system"
	WebhookService    = "vmlet-webhook"
	WebhookDNS        = WebhookService + "." + WebhookNamespace + ".svc"
	WebhookCAName     = "vmlet-webhook-ca"
	WebhookConfigName = "vmlet-eviction"
	webhookName       = "eviction.vmlet.dev"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;create;patch

// RegisterWebhook writes the ValidatingWebhookConfiguration that sends launcher pods'
// evictions to EvictionWebhook: at url when given (a controller outside the cluster), else at
// the Service; caPEM is the serving certificate's CA. failurePolicy Ignore: a webhook that is
// down never blocks evictions (KubeVirt's choice too). Idempotent (server-side apply).
//
// Equivalent to `kubectl apply` of a ValidatingWebhookConfiguration with one webhook on
// CREATE pods/eviction.
func RegisterWebhook(ctx context.Context, c client.Client, caPEM []byte, url string) error {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: caPEM}
	if url != "" {
		cc.URL = ptr.To(url)
	} else {
		cc.Service = &admissionregistrationv1.ServiceReference{Namespace: WebhookNamespace, Name: WebhookService,
			Path: ptr.To(WebhookPath), Port: ptr.To[int32](443)}
	}
	wc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         webhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wc)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner("vmlet-controller"), client.ForceOwnership); err != nil {
		return fmt.Errorf("register the eviction webhook: %w", err)
	}
	return nil
}
