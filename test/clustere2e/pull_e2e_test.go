package clustere2e_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestClusterPullFailuresAreSaid: in cluster mode a launcher pod runs only once the node agent
// made the VMI's volume folder, which it does once the VMI's images are pulled. So a pull that
// cannot happen must be said by the agent, not hidden behind "waiting for the launcher" (as it
// was: the pod's existence counted as a started launcher): from a registry that wants a login,
// a VMI without a pull secret backs off (ImagePullBackOff saying none were given), one whose
// Secret is missing waits (SecretNotFound), both Scheduled, and once the Secret exists the
// guest boots.
func TestClusterPullFailuresAreSaid(t *testing.T) {
	files := testguest.Assets(t)
	kimg, err := images.KernelBoot(files.Kernel, guestvmi.KernelPath, files.Initrd, guestvmi.InitrdPath)
	if err != nil {
		t.Fatal(err)
	}
	const user, pass = "vmlet", "cluster-Pass-4711"
	reg := storagetest.StartRegistry(t)
	reg.RequireAuth(user, pass)
	ref := reg.Push(t, "private/guest:1", kimg)
	c := startCluster(t)
	ctx := context.Background()
	cl := c.env.Client

	anon := guestvmi.VMI("pull-anon", ref)
	if err := cl.Create(ctx, anon); err != nil {
		t.Fatal(err)
	}
	c.waitVMI(t, client.ObjectKeyFromObject(anon), time.Minute, "Scheduled, ImagePullBackOff", func(v *vmletv1.VirtualMachineInstance) bool {
		s := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return v.Status.Phase == vmletv1.Scheduled && s != nil && s.Reason == "ImagePullBackOff" &&
			strings.Contains(s.Message, ref) && strings.Contains(s.Message, "none were given")
	})
	c.deleteVMI(t, anon) // its pod never ran: gone with the VMI, nothing left on the node

	vmi := guestvmi.VMI("pull-secret", ref)
	vmi.Spec.Domain.Firmware.KernelBoot.Container.ImagePullSecret = "regcred"
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	c.waitVMI(t, key, time.Minute, "Scheduled, SecretNotFound", func(v *vmletv1.VirtualMachineInstance) bool {
		s := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return v.Status.Phase == vmletv1.Scheduled && s != nil && s.Reason == "SecretNotFound" && strings.Contains(s.Message, "regcred")
	})
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, reg.Host, auth)}}
	if err := cl.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Delete(ctx, secret) }()
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	if ready.Status.Launcher == nil || ready.Status.Launcher.Pod == "" {
		t.Errorf("ready without a launcher pod: %+v", ready.Status.Launcher)
	}
	c.deleteVMI(t, ready)
}
