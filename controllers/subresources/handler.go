package subresources

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistream"
)

var vmiResource = schema.GroupResource{Group: vmletv1.GroupVersion.Group, Resource: Resource}

func discovery(w http.ResponseWriter, _ *http.Request) {
	vmistream.WriteJSON(w, http.StatusOK, resourceList())
}

// request is one parsed subresource request.
type request struct {
	ns, name, sub string
	rest          string // the path from "namespaces/" on, as the node agent serves it
}

// parse reads /apis/<group>/<version>/namespaces/{ns}/virtualmachineinstances/{name}/{sub...}.
func parse(path string) (request, bool) {
	rest := strings.TrimPrefix(path, prefix+"/")
	parts := strings.Split(rest, "/")
	if len(parts) < 5 || parts[0] != "namespaces" || parts[2] != Resource || parts[1] == "" || parts[3] == "" {
		return request{}, false
	}
	sub := parts[4]
	switch {
	case len(parts) == 5 && sub != "portforward":
	case len(parts) == 6 && (sub == "portforward" || (sub == "vnc" && parts[5] == "screenshot")):
	default:
		return request{}, false
	}
	return request{ns: parts[1], name: parts[3], sub: sub, rest: rest}, true
}

// serveSub serves one subresource request; the generic server authenticated and authorized
// it already (virtualmachineinstances/<sub>, the verb of its method).
func (s *Server) serveSub(w http.ResponseWriter, r *http.Request) {
	req, ok := parse(r.URL.Path)
	if !ok || !streamingOrKnown(req.sub) {
		vmistream.WriteStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: Group, Resource: Resource}, r.URL.Path))
		return
	}
	u, ok := apirequest.UserFrom(r.Context())
	if !ok {
		vmistream.WriteStatus(w, apierrors.NewUnauthorized("no user"))
		return
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := s.cfg.Client.Get(r.Context(), client.ObjectKey{Namespace: req.ns, Name: req.name}, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			vmistream.WriteStatus(w, apierrors.NewNotFound(vmiResource, req.name))
		} else {
			vmistream.WriteStatus(w, apierrors.NewInternalError(err))
		}
		return
	}
	switch req.sub {
	case "pause", "unpause":
		if r.Method != http.MethodPut {
			vmistream.WriteStatus(w, apierrors.NewMethodNotSupported(vmiResource, r.Method))
			return
		}
		s.pause(w, r, vmi, req.sub == "pause", u.GetName())
		return
	}
	if vmi.Status.Phase != vmletv1.Running || vmi.Status.NodeName == "" {
		vmistream.WriteStatus(w, apierrors.NewConflict(vmiResource, req.name, fmt.Errorf("the VMI is not running (phase %q)", vmi.Status.Phase)))
		return
	}
	np, err := s.nodeProxy(r, vmi.Status.NodeName)
	if err != nil {
		vmistream.WriteStatus(w, err)
		return
	}
	allow := ""
	if req.sub == "qmp" {
		a, err := AllowListFor(r.Context(), s.cfg.Client, s.authz, u, req.ns, req.name)
		if err != nil {
			vmistream.WriteStatus(w, apierrors.NewInternalError(err))
			return
		}
		allow = a.String()
	}
	np.serve(w, r, req.rest, u.GetName(), allow)
}

func streamingOrKnown(sub string) bool {
	for _, s := range subresources {
		if strings.SplitN(s.name, "/", 2)[0] == sub {
			return true
		}
	}
	return false
}

// pause sets spec.paused (the node agent pauses or unpauses and keeps it so).
func (s *Server) pause(w http.ResponseWriter, r *http.Request, vmi *vmletv1.VirtualMachineInstance, paused bool, caller string) {
	if vmi.Status.Phase != vmletv1.Running {
		vmistream.WriteStatus(w, apierrors.NewConflict(vmiResource, vmi.Name, fmt.Errorf("the VMI is not running (phase %q)", vmi.Status.Phase)))
		return
	}
	if vmi.Spec.Paused == paused {
		state := "paused"
		if !paused {
			state = "not paused"
		}
		vmistream.WriteStatus(w, apierrors.NewConflict(vmiResource, vmi.Name, errors.New("the VMI is already "+state)))
		return
	}
	patch := fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused)
	if err := s.cfg.Client.Patch(r.Context(), vmi, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		vmistream.WriteStatus(w, err)
		return
	}
	if s.cfg.Recorder != nil {
		verb := map[bool]string{true: "paused", false: "unpaused"}[paused]
		s.cfg.Recorder.Eventf(vmi, nil, "Normal", "SubresourcePause", "Pause", "%s by user %q (spec.paused=%t)", verb, caller, paused)
	}
	vmistream.WriteJSON(w, http.StatusOK, struct{}{})
}

// nodeAddress is where the node's agent serves VMI streams (its AnnotStreamsAddress) and the
// pin of its certificate (AnnotStreamsCertSHA256, "" when CA-signed).
func (s *Server) nodeAddress(r *http.Request, name string) (addr, pin string, err error) {
	n := &corev1.Node{}
	if err := s.cfg.Client.Get(r.Context(), client.ObjectKey{Name: name}, n); err != nil {
		return "", "", apierrors.NewServiceUnavailable(fmt.Sprintf("node %s: %v", name, err))
	}
	addr = n.Annotations[controllers.AnnotStreamsAddress]
	if addr == "" {
		return "", "", apierrors.NewConflict(vmiResource, name, fmt.Errorf("node %s publishes no %s: its agent serves no VMI streams", name, controllers.AnnotStreamsAddress))
	}
	return addr, n.Annotations[controllers.AnnotStreamsCertSHA256], nil
}
