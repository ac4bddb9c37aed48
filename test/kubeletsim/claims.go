package kubeletsim

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// claims resolves the container's persistentVolumeClaim volumes as the kubelet's volume manager
// does before it starts a pod: each claim must exist and be bound, its PersistentVolume a
// local or hostPath one whose path exists (a folder for volumeMounts, a block device for
// volumeDevices); anything else fails the start (the pod waits, as with FailedMount, and the
// error requeues). With no mount namespace here a claim is "mounted" where its volume is: the
// mount path (device path) maps to the volume's path, and a pod asking for another path is
// refused, since its container would not find the claim there.
func (k *Kubelet) claims(ctx context.Context, pod *corev1.Pod, c corev1.Container, paths map[string]string) error {
	claims := map[string]string{} // pod volume → claim name
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	resolve := func(volume string, block bool) (string, error) {
		name, ok := claims[volume]
		if !ok {
			return "", fmt.Errorf("pod %s: volume %s: kubeletsim supports hostPath and persistentVolumeClaim volumes only", pod.Name, volume)
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k.Client.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, pvc); err != nil {
			return "", fmt.Errorf("pod %s: volume %s: claim %s: %w", pod.Name, volume, name, err)
		}
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			return "", fmt.Errorf("pod %s: volume %s: claim %s is not bound", pod.Name, volume, name)
		}
		pv := &corev1.PersistentVolume{}
		if err := k.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return "", fmt.Errorf("pod %s: volume %s: PersistentVolume %s: %w", pod.Name, volume, pvc.Spec.VolumeName, err)
		}
		var p string
		switch {
		case pv.Spec.Local != nil:
			p = pv.Spec.Local.Path
		case pv.Spec.HostPath != nil:
			p = pv.Spec.HostPath.Path
		default:
			return "", fmt.Errorf("pod %s: volume %s: kubeletsim mounts local and hostPath PersistentVolumes only", pod.Name, volume)
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return "", fmt.Errorf("pod %s: volume %s: MountVolume.NewMounter failed: %w", pod.Name, volume, err)
		case block && fi.Mode()&os.ModeDevice == 0:
			return "", fmt.Errorf("pod %s: volume %s: %s is not a block device", pod.Name, volume, p)
		case !block && !fi.IsDir():
			return "", fmt.Errorf("pod %s: volume %s: %s is not a directory", pod.Name, volume, p)
		}
		return p, nil
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := paths[vm.MountPath]; ok {
			continue
		}
		p, err := resolve(vm.Name, false)
		if err != nil {
			return err
		}
		if vm.MountPath != p {
			return fmt.Errorf("pod %s: volume %s: kubeletsim mounts a claim only at its volume's path %s, not %s", pod.Name, vm.Name, p, vm.MountPath)
		}
		paths[vm.MountPath] = p
	}
	for _, vd := range c.VolumeDevices {
		p, err := resolve(vd.Name, true)
		if err != nil {
			return err
		}
		if vd.DevicePath != p {
			return fmt.Errorf("pod %s: volume %s: kubeletsim maps a block claim only at its device's path %s, not %s", pod.Name, vd.Name, p, vd.DevicePath)
		}
	}
	return nil
}
