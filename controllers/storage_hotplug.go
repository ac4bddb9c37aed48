package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage"
)

// DiskHotplugger attaches disks to a running domain and detaches them: the launcher's
// HotplugDisk and UnplugDisk RPCs. A Launcher without it cannot hotplug volumes.
type DiskHotplugger interface {
	// AttachedDisks lists the ids of the domain's disks, cold- and hotplugged.
	AttachedDisks(ctx context.Context) ([]string, error)
	HotplugDisk(ctx context.Context, d qemu.Disk) error
	// UnplugDisk returns once the guest released the disk.
	UnplugDisk(ctx context.Context, id string) error
}

var _ DiskHotplugger = (*grpcLauncher)(nil)

func (g *grpcLauncher) AttachedDisks(ctx context.Context) ([]string, error) {
	ctx, cancel := bound(ctx, callAttachedDisks)
	defer cancel()
	d, err := g.c.GetDomain(ctx)
	if err != nil {
		return nil, err
	}
	return d.GetDisks(), nil
}

// HotplugDisk opens the disk (as root, on the node) and hands the files to the launcher
// before it asks for the disk: QEMU opens no path of a hot-plugged disk. A launcher pod's
// mounts were fixed when it was made, so a claim plugged later is not in its container (its
// attachment pod holds it on the node); the same hand-over serves every runtime, so one path
// is tested everywhere.
func (g *grpcLauncher) HotplugDisk(ctx context.Context, d qemu.Disk) error {
	ctx, cancel := bound(ctx, callHotplugDisk)
	defer cancel()
	if err := g.HandOverDisk(ctx, d); err != nil {
		return err
	}
	return g.c.HotplugDisk(ctx, launcher.DiskToProto(d))
}

// DiskHandOver is a launcher that takes a disk's image as open files (the next start or
// hotplug of that disk uses them instead of its path).
type DiskHandOver interface {
	HandOverDisk(ctx context.Context, d qemu.Disk) error
}

var _ DiskHandOver = (*grpcLauncher)(nil)

// HandOverDisk opens d's image on the node (storage.OpenDisk) and hands the files to the
// launcher (launcher.HandOverDisk); its copies are closed when it returns.
func (g *grpcLauncher) HandOverDisk(ctx context.Context, d qemu.Disk) error {
	files, err := storage.OpenDisk(d.Path, d.ReadOnly || d.CDROM)
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err := launcher.HandOverDisk(ctx, g.paths.TapSocket(), d.ID, files); err != nil {
		return fmt.Errorf("hand disk %s to the launcher: %w", d.ID, err)
	}
	return nil
}

func (g *grpcLauncher) UnplugDisk(ctx context.Context, id string) error {
	ctx, cancel := bound(ctx, callUnplugDisk)
	defer cancel()
	return g.c.UnplugDisk(ctx, id)
}

// holdHotplug stands for reconcileHotplug while the vmi migrates away from this node: QEMU
// plugs and unplugs no device during a migration, and the target starts with the disks the
// source had when it published its layout. Hotpluggable volumes attached stay as they are; the
// others wait (Pending, WaitingForMigration) for the node the guest runs on afterwards, which
// attaches them. Pure.
func holdHotplug(vmi *vmletv1.VirtualMachineInstance) map[string]volumeState {
	ready := map[string]bool{}
	for _, s := range vmi.Status.VolumeStatus {
		ready[s.Name] = s.Phase == vmletv1.VolumeReady
	}
	states := map[string]volumeState{}
	for i := range vmi.Spec.Volumes {
		if v := &vmi.Spec.Volumes[i]; v.Hotpluggable() && !ready[v.Name] {
			states[v.Name] = volumeState{vmletv1.VolumePending, vmistatus.ReasonHotplugAfterMigration,
				"the VMI is migrating: the volume is attached on the node it runs on once the migration ended"}
		}
	}
	return states
}

// waitForMigration writes the volume status of a vmi whose migration away from this node is
// streaming (the ordinary pass, which writes it, does not run then): holdHotplug's, with the
// claims described as that pass describes them. While the launcher pod's claims cannot be read
// the status stays as it is (the next pass, a second later, looks again).
func (r *VMIReconciler) waitForMigration(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) {
	pod, err := r.podClaims(ctx, vmi)
	if err != nil {
		return
	}
	node := r.Env(r.Runtime.Dir(string(vmi.UID))).Storage.Claims
	r.setVolumeStatus(vmi, true, holdHotplug(vmi), statusClaims(vmi, pod, node))
}

// volumeState is where one volume stands after a reconcile.
type volumeState struct {
	phase   vmletv1.VolumePhase
	reason  vmistatus.Reason
	message string
}

// reconcileHotplug makes the running domain's hotplugged disks match the VMI's hotpluggable
// volumes (want.HotplugVolumes): it prepares and attaches the missing ones and detaches disks whose volume is gone
// from the spec. A volume that fails is reported in its status; the others go on. A volume
// whose storage could not be made (no space on the node, a claim folder not there) is tried
// again after a back-off (the image pulls' one: 10 s doubling to 5 min by default), which the
// returned duration asks the caller to wake for: nothing else may happen to the VMI meanwhile.
func (r *VMIReconciler) reconcileHotplug(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, want *translate.Desired, spec *qemu.Spec) (map[string]volumeState, time.Duration, error) {
	states := map[string]volumeState{}
	hp, ok := l.(DiskHotplugger)
	if !ok {
		for _, hv := range want.HotplugVolumes {
			states[hv.Name] = volumeState{vmletv1.VolumePending, vmistatus.ReasonHotplugUnsupported, "this node's launchers cannot hotplug disks"}
		}
		return states, 0, nil
	}
	attached, err := hp.AttachedDisks(ctx)
	if err != nil {
		return states, 0, err
	}
	var retry time.Duration
	isAttached := map[string]bool{}
	for _, id := range attached {
		isAttached[id] = true
	}
	keep := map[string]bool{}
	for _, d := range spec.Disks {
		keep[d.ID] = true
	}
	var errs []error
	for _, hv := range want.HotplugVolumes {
		if hv.Err != nil {
			states[hv.Name] = volumeState{vmletv1.VolumePending, specReason(hv.Err), hv.Err.Error()}
			if cs, ok := r.Runtime.(ClaimSource); ok && errors.Is(hv.Err, storage.ErrUnknownClaim) {
				// A launcher pod's claim plugged later: its attachment pod holds it once it runs.
				states[hv.Name] = volumeState{vmletv1.VolumePending, vmistatus.ReasonAttachmentPodPending, cs.AttachmentWait(ctx, string(vmi.UID), hv.Name)}
				if id := storage.DiskID(hv.Name); isAttached[id] {
					// Its attachment pod went (deleted, evicted by a drain) while the guest has
					// the disk: QEMU holds the files it was handed, so the disk stays, and the
					// controller makes the pod again.
					keep[id] = true
					states[hv.Name] = volumeState{phase: vmletv1.VolumeReady}
				}
			}
			continue
		}
		// A volume in the spec keeps its disk while its storage is prepared again (the agent
		// restarted) or fails: only disks whose volume left the spec are unplugged.
		for _, d := range hv.Plan.Disks {
			keep[d.ID] = true
		}
		k := hotKey{vmi.UID, hv.Name}
		if e, waiting := r.hotBackoff().Waiting(k); waiting {
			retry = soonest(retry, time.Until(e.Next))
			continue // its status says why (kept)
		}
		res, err := r.prepareHotplugVolume(vmi.UID, hv)
		if errors.Is(err, errStoragePreparing) {
			states[hv.Name] = volumeState{phase: vmletv1.VolumePending} // its end wakes the VMI
			continue
		}
		if err != nil {
			e := r.hotBackoff().Failed(k, err.Error())
			retry = soonest(retry, e.Delay)
			states[hv.Name] = volumeState{vmletv1.VolumePending, vmistatus.Reason(storage.Reason(err)),
				fmt.Sprintf("%v; %s", err, e.NextTry())}
			continue
		}
		r.hotBackoff().Reset(k)
		d := res.Disks[0]
		keep[d.ID] = true
		if !isAttached[d.ID] {
			pid := 0
			if vmi.Status.Launcher != nil {
				pid = int(vmi.Status.Launcher.PID)
			}
			if err := r.labelHotplug(vmi, hv.Plan, res, pid); err != nil {
				states[hv.Name] = volumeState{vmletv1.VolumePending, vmistatus.ReasonSELinuxLabelFailed, err.Error()}
				errs = append(errs, fmt.Errorf("label volume %s: %w", hv.Name, err))
				continue
			}
			if err := hp.HotplugDisk(ctx, d); err != nil {
				states[hv.Name] = volumeState{vmletv1.VolumePending, vmistatus.ReasonHotplugFailed, err.Error()}
				errs = append(errs, fmt.Errorf("hotplug volume %s: %w", hv.Name, err))
				continue
			}
			r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonVolumeAttached), "Hotplug", "volume %s attached as disk %s", hv.Name, d.ID)
		}
		states[hv.Name] = volumeState{phase: vmletv1.VolumeReady}
	}
	inSpec := map[string]bool{}
	for _, hv := range want.HotplugVolumes {
		inSpec[hv.Name] = true
	}
	r.hotBackoff().DeleteFunc(func(k hotKey) bool { return k.uid == vmi.UID && !inSpec[k.volume] }) // added again later: tried at once
	for _, id := range attached {
		if keep[id] {
			continue
		}
		uctx, cancel := context.WithTimeout(ctx, unplugTimeout)
		err := hp.UnplugDisk(uctx, id)
		cancel()
		if errors.Is(err, launcher.ErrUnplugPending) {
			errs = append(errs, unplugPending{"disk " + id})
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("unplug disk %s: %w", id, err))
			continue
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonVolumeDetached), "Unplug", "disk %s detached (its volume left the spec)", id)
	}
	return states, retry, errors.Join(errs...)
}

// hotBackoff is the node's back-off of hotpluggable volumes whose storage failed, made on
// first use.
func (r *VMIReconciler) hotBackoff() *backoff.Backoff[hotKey] { return lazyBackoff(r, &r.hotRetries) }

// setVolumeStatus writes status.volumeStatus in spec order. Volumes attached at boot are Ready
// while the domain runs; hotpluggable ones get their state from this reconcile (hot), or keep
// the one they had when it did not look at them. A volume that newly fails gets a Warning event
// (one that waits for a migration a Normal one).
// Volumes on the launcher pod's claims, and on claims every node shares (statusClaims), say
// which claim (persistentVolumeClaimInfo).
func (r *VMIReconciler) setVolumeStatus(vmi *vmletv1.VirtualMachineInstance, running bool, hot map[string]volumeState, claims map[string]launcherpod.Claim) {
	old := map[string]vmletv1.VolumeStatus{}
	for _, s := range vmi.Status.VolumeStatus {
		old[s.Name] = s
	}
	var out []vmletv1.VolumeStatus
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		s := vmletv1.VolumeStatus{Name: v.Name, Target: storage.DiskID(v.Name), Phase: vmletv1.VolumePending}
		if !v.Hotpluggable() {
			if running {
				s.Phase = vmletv1.VolumeReady
			}
			if c, ok := claims[volumeClaim(v)]; ok {
				s.PersistentVolumeClaimInfo = claimInfo(c)
			}
			out = append(out, s)
			continue
		}
		s.HotplugVolume = &vmletv1.HotplugVolumeStatus{}
		if c, ok := claims[volumeClaim(v)]; ok {
			s.PersistentVolumeClaimInfo = claimInfo(c)
		}
		st, ok := hot[v.Name]
		switch {
		case ok:
			s.Phase, s.Reason, s.Message = st.phase, string(st.reason), st.message
		case old[v.Name].Phase != "":
			prev := old[v.Name]
			s.Phase, s.Reason, s.Message = prev.Phase, prev.Reason, prev.Message
		}
		if s.Reason != "" && s.Reason != old[v.Name].Reason {
			kind := "Warning"
			if s.Reason == string(vmistatus.ReasonHotplugAfterMigration) || s.Reason == string(vmistatus.ReasonAttachmentPodPending) {
				kind = "Normal" // a wait, not a fault
			}
			r.Recorder.Eventf(vmi, nil, kind, s.Reason, "Hotplug", "volume %s: %s", v.Name, s.Message)
		}
		out = append(out, s)
	}
	vmi.Status.VolumeStatus = out
}
