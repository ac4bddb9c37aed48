package evacuation

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// WebhookPath is where EvictionWebhook is served.
const WebhookPath = "/validate-eviction"

// ReasonEvacuationTriggered is the Event on a VMI whose launcher pod's eviction started its
// evacuation.
const ReasonEvacuationTriggered = "EvictionTriggeredEvacuation"

// EvictionWebhook is the validating admission webhook on pods/eviction (KubeVirt's
// virt-launcher eviction interceptor): the eviction of a VMI's launcher pod is answered by
// Eviction — refused with 429 while the VMI migrates away (marked for the evacuation
// Controller) or cannot, allowed otherwise. Pods that are not launcher pods are allowed.
type EvictionWebhook struct {
	// Client writes the VMI's status.evacuationNodeName; Reader reads the pod, the VMI and
	// the cluster's default strategy, uncached (an eviction is rare, and must see now).
	Client   client.Client
	Reader   client.Reader
	Recorder events.EventRecorder
}

var _ admission.Handler = (*EvictionWebhook)(nil)

// Handle answers one eviction.
func (w *EvictionWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "eviction" {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("")
		}
		return retry(fmt.Sprintf("read pod %s/%s: %v", req.Namespace, req.Name, err))
	}
	ref := metav1.GetControllerOf(pod)
	if pod.Labels[launcherpod.LabelAppName] != launcherpod.AppName || ref == nil || ref.Kind != "VirtualMachineInstance" {
		return admission.Allowed("")
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: ref.Name}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("")
		}
		return retry(fmt.Sprintf("read vmi %s/%s: %v", pod.Namespace, ref.Name, err))
	}
	if vmi.UID != ref.UID {
		return admission.Allowed("") // the pod of an older VMI of that name
	}
	def, _, err := config(ctx, w.Reader)
	if err != nil {
		return retry(err.Error()) // said until the ConfigMap is mended: nothing is lost
	}
	v := Eviction(pod, vmi, def)
	if v.Mark != "" && vmi.Status.EvacuationNodeName != v.Mark && !ptrTrue(req.DryRun) {
		if err := w.mark(ctx, vmi, v.Mark); err != nil {
			return retry(fmt.Sprintf("mark vmi %s/%s for evacuation: %v", vmi.Namespace, vmi.Name, err))
		}
		w.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, ReasonEvacuationTriggered, "Evacuate",
			"the eviction of launcher pod %s started the VMI's evacuation from node %s", pod.Name, v.Mark)
	}
	if v.Allowed {
		return admission.Allowed("")
	}
	return refuse(v.Code, v.Message)
}

// mark sets vmi's status.evacuationNodeName (optimistic lock; a conflict is the caller's to
// retry: kubectl drain asks again).
func (w *EvictionWebhook) mark(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, node string) error {
	orig := vmi.DeepCopy()
	vmi.Status.EvacuationNodeName = node
	return w.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// retry refuses with 429: kubectl drain asks again (a 500 would end its drain).
func retry(msg string) admission.Response {
	return refuse(http.StatusTooManyRequests, "eviction not decided yet: "+msg)
}

func refuse(code int32, msg string) admission.Response {
	r := admission.Denied(msg)
	r.Result.Code = code
	if code == http.StatusTooManyRequests {
		r.Result.Reason = metav1.StatusReasonTooManyRequests
	}
	return r
}

func ptrTrue(b *bool) bool { return b != nil && *b }
