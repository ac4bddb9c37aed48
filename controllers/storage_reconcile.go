package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
)

// NodeStorage is the node agent's storage side.
type NodeStorage struct {
	// Host pulls images into the node's cache and makes disk files.
	Host *storage.Host
	// Root holds one storage folder per VMI (Root/<uid>), removed with the VMI. Keep it on a
	// disk, not on tmpfs: overlays and empty disks grow with the guest's writes.
	Root string
	// ApplyTimeout bounds one Apply (image pulls included); 0 means defaultApplyTimeout.
	ApplyTimeout time.Duration
	// PullBackOff is the wait after a VMI's first failed pull of an image, doubling with each
	// further failure up to PullBackOffMax; 0 means the kubelet's 10 s and 5 min.
	PullBackOff, PullBackOffMax time.Duration
}

// unplugPending is a device whose unplug the guest has not acknowledged yet (not a failure: the
// pass asks again after unplugRetry).
type unplugPending struct{ device string }

func (u unplugPending) Error() string {
	return u.device + ": unplug pending (the guest has not released it yet)"
}

// onlyUnplugPending reports whether err is nothing but pending unplugs: every leaf of its
// errors.Join tree is one (or describes one with %w).
func onlyUnplugPending(err error) bool {
	if err == nil {
		return false
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		_, pending := errors.AsType[unplugPending](err)
		return pending
	}
	for _, e := range j.Unwrap() {
		if e != nil && !onlyUnplugPending(e) {
			return false
		}
	}
	return len(j.Unwrap()) > 0
}

const (
	defaultApplyTimeout = 10 * time.Minute
	// unplugTimeout bounds waiting for the guest to release a disk or NIC within one pass
	// (Linux's pciehp alone waits 5 s after the attention button); the unplug stays pending
	// in QEMU, and the pass after unplugRetry waits for it again: a slow guest holds no worker.
	unplugTimeout = 2 * time.Second
	unplugRetry   = 2 * time.Second
	// secretRetry is how often a VMI waiting for a missing Secret looks again.
	secretRetry = 3 * time.Second
)

// volumeDir is the VMI's storage folder.
func (r *VMIReconciler) volumeDir(uid types.UID) string {
	return filepath.Join(r.Storage.Root, string(uid))
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// readRefs reads the Secrets the VMI's cloud-init volumes and image pull secrets name, from the
// API server (not the cache: the agent does not watch every Secret of the cluster). Once the
// launcher holds a domain (started), the VMI's images are pinned and cached, so a pull secret
// it can no longer read does not stop it: its pulls go anonymous.
func (r *VMIReconciler) readRefs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, started bool) (translate.Referenced, error) {
	refs := translate.Referenced{Secrets: map[string]map[string][]byte{}, PullSecrets: map[string]oci.Credentials{}}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	for _, name := range pullSecretNames(vmi) {
		if _, done := refs.PullSecrets[name]; done {
			continue
		}
		creds, err := readPullSecret(ctx, reader, vmi.Namespace, name)
		if err != nil && !started {
			return refs, err
		}
		refs.PullSecrets[name] = creds
	}
	for _, name := range secretNames(vmi) {
		if _, done := refs.Secrets[name]; done {
			continue
		}
		var s corev1.Secret
		if err := reader.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, &s); err != nil {
			return refs, fmt.Errorf("read cloud-init secret %s/%s: %w", vmi.Namespace, name, err)
		}
		refs.Secrets[name] = s.Data
	}
	return refs, nil
}

// secretNames lists the Secrets named by the VMI's cloud-init volumes.
func secretNames(vmi *vmletv1.VirtualMachineInstance) []string {
	var names []string
	for _, v := range vmi.Spec.Volumes {
		var d *vmletv1.CloudInitData
		switch {
		case v.CloudInitNoCloud != nil:
			d = &v.CloudInitNoCloud.CloudInitData
		case v.CloudInitConfigDrive != nil:
			d = &v.CloudInitConfigDrive.CloudInitData
		default:
			continue
		}
		if d.UserDataSecretRef != nil {
			names = append(names, d.UserDataSecretRef.Name)
		}
		if d.NetworkDataSecretRef != nil {
			names = append(names, d.NetworkDataSecretRef.Name)
		}
	}
	return names
}

// ErrInvalidPullSecret marks an image pull secret of the wrong type or with content that does not
// parse; the VMI waits for it to be fixed.
var ErrInvalidPullSecret = errors.New("invalid image pull secret")

// readPullSecret reads an image pull secret and parses its docker config. Errors never hold
// the Secret's content.
func readPullSecret(ctx context.Context, reader client.Reader, namespace, name string) (oci.Credentials, error) {
	var s corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("read image pull secret %s/%s: %w", namespace, name, err)
	}
	var creds oci.Credentials
	var err error
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		creds, err = oci.ParseDockerConfigJSON(s.Data[corev1.DockerConfigJsonKey])
	case corev1.SecretTypeDockercfg:
		creds, err = oci.ParseDockerCfg(s.Data[corev1.DockerConfigKey])
	default:
		err = fmt.Errorf("type %q, want %s or %s", s.Type, corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg)
	}
	if err != nil {
		return nil, fmt.Errorf("image pull secret %s/%s: %w: %w", namespace, name, ErrInvalidPullSecret, err)
	}
	return creds, nil
}

// pullSecretNames lists the Secrets named by the VMI's containerDisks and kernel boot
// container.
func pullSecretNames(vmi *vmletv1.VirtualMachineInstance) []string {
	var names []string
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil && v.ContainerDisk.ImagePullSecret != "" {
			names = append(names, v.ContainerDisk.ImagePullSecret)
		}
	}
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil && fw.KernelBoot.Container.ImagePullSecret != "" {
		names = append(names, fw.KernelBoot.Container.ImagePullSecret)
	}
	return names
}

// refsFailed reports a Secret that could not be read. A missing one is waited for, as a pod
// waits for a missing Secret volume: the agent does not watch Secrets, so it looks again after
// secretRetry. Other read errors are retried with the controller's backoff.
func (r *VMIReconciler) refsFailed(vmi *vmletv1.VirtualMachineInstance, err error) (ctrl.Result, error) {
	if vmi.Status.Phase == "" || vmi.Status.Phase == vmletv1.Pending {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	}
	if errors.Is(err, ErrClaimsUnknown) {
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonClaimsUnknown, err.Error())
		return ctrl.Result{RequeueAfter: secretRetry}, nil
	}
	if errors.Is(err, ErrInvalidPullSecret) {
		if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c == nil || c.Reason != string(vmistatus.ReasonInvalidImagePullSecret) {
			r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonInvalidImagePullSecret), "ReadSecret", "%v", err)
		}
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonInvalidImagePullSecret, err.Error())
		return ctrl.Result{RequeueAfter: secretRetry}, nil
	}
	if !apierrors.IsNotFound(err) {
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonSecretReadFailed, err.Error())
		return ctrl.Result{}, err
	}
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c == nil || c.Reason != string(vmistatus.ReasonSecretNotFound) {
		r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonSecretNotFound), "ReadSecret", "%v", err)
	}
	vmistatus.NotSynchronized(vmi, vmistatus.ReasonSecretNotFound, err.Error())
	return ctrl.Result{RequeueAfter: secretRetry}, nil
}

func (r *VMIReconciler) apply(ctx context.Context, p *storage.VMPlan) (*storage.Result, error) {
	if r.Storage.Host == nil {
		return nil, errors.New("apply storage: the node has no storage configured")
	}
	// Launchers' users pass through to their own VMI's folder (0700 each); nobody lists it.
	if err := os.MkdirAll(r.Storage.Root, 0o711); err != nil {
		return nil, fmt.Errorf("make volume root: %w", err)
	}
	d := r.Storage.ApplyTimeout
	if d <= 0 {
		d = defaultApplyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return r.Storage.Host.Apply(ctx, p)
}

// degraded reports a started VMI whose spec can no longer be carried out (a re-translation or
// re-Apply failed): the guest keeps its domain and open disks, Synchronized=False says why, and
// a Warning event marks the change.
func (r *VMIReconciler) degraded(vmi *vmletv1.VirtualMachineInstance, reason vmistatus.Reason, action string, err error) {
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c == nil || c.Reason != string(reason) {
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), action, "%v", err)
	}
	vmistatus.NotSynchronized(vmi, reason, err.Error())
}

// cleanupStorage removes the VMI's storage folder (overlays, empty disks, ISOs, kernel links)
// and forgets its pull back-offs, after its storage operation (if any) has returned; host disks
// and claims are not in the folder and stay.
func (r *VMIReconciler) cleanupStorage(vmi *vmletv1.VirtualMachineInstance) error {
	r.forgetStorage(vmi.UID)
	r.forgetPulls(vmi.UID)
	if r.Storage.Root == "" {
		return nil
	}
	if err := r.restoreLabels(vmi); err != nil {
		return err
	}
	if err := storage.Cleanup(r.volumeDir(vmi.UID)); err != nil {
		return fmt.Errorf("remove volumes: %w", err)
	}
	return nil
}

// specReason is the VMI reason of a translation error.
func specReason(err error) vmistatus.Reason {
	var ve *storage.VolumeError
	switch {
	case errors.Is(err, translate.ErrUnsupported):
		return vmistatus.ReasonUnsupported
	case errors.As(err, &ve):
		return vmistatus.Reason(storage.Reason(err))
	}
	return vmistatus.ReasonInvalidSpec
}
