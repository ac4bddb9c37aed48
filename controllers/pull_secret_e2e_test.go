package controllers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIImagePullSecret: a registry that asks for a login (basic auth, 401 with a challenge
// otherwise) holds the test guest's kernelBoot image and a data containerDisk. A VMI naming
// them without a pull secret waits in ImagePullBackOff saying none were given. One naming the
// Secret "regcred" on both: while it is missing the VMI waits (Scheduled, SecretNotFound, an
// Event), an Opaque one is refused (InvalidImagePullSecret), a dockerconfigjson one with a
// wrong password gives ErrImagePull saying the registry refused the credentials (the data disk
// is pulled first), and once the
// password is fixed the images are pulled and the guest boots. No status or Event shows the
// password.
func TestVMIImagePullSecret(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	kimg, err := images.KernelBoot(files.Kernel, guestvmi.KernelPath, files.Initrd, guestvmi.InitrdPath)
	if err != nil {
		t.Fatal(err)
	}
	dimg, err := images.ContainerDisk(files.DataDisk)
	if err != nil {
		t.Fatal(err)
	}
	const user, pass, wrong = "vmlet", "right-Pass-4711", "wrong-Pass-0815"
	reg := storagetest.StartRegistry(t)
	reg.RequireAuth(user, pass)
	kernelRef := reg.Push(t, "private/guest:1", kimg)
	dataRef := reg.Push(t, "private/data:1", dimg)
	a := startAgent(t, agentOptions{ImageCache: nodeDir(t), PullBackOff: time.Second, PullBackOffMax: 2 * time.Second})
	defer a.stop(t)
	ctx := context.Background()

	// No pull secret: the registry's 401 is an ErrImagePull that says credentials are missing.
	anon := guestvmi.VMI("pull-anon", kernelRef)
	if err := env.Client.Create(ctx, anon); err != nil {
		t.Fatal(err)
	}
	waitPullBackOff(t, client.ObjectKeyFromObject(anon), kernelRef, "none were given")
	waitEvent(t, anon, "ErrImagePull")
	if err := env.Client.Delete(ctx, anon); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, client.ObjectKeyFromObject(anon))

	vmi := guestvmi.VMI("pull-secret", kernelRef)
	vmi.Spec.Domain.Firmware.KernelBoot.Container.ImagePullSecret = "regcred"
	vmi.Spec.Volumes = []vmletv1.Volume{{Name: "data", VolumeSource: vmletv1.VolumeSource{
		ContainerDisk: &vmletv1.ContainerDiskSource{Image: dataRef, ImagePullSecret: "regcred"}}}}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)

	// (1) The Secret is missing: the VMI waits for it.
	got := waitSynchronizedReason(t, key, "SecretNotFound", "regcred")
	if got.Status.Phase != vmletv1.Scheduled {
		t.Errorf("a VMI waiting for its pull secret is %s, want Scheduled", got.Status.Phase)
	}
	waitEvent(t, got, "SecretNotFound")

	// A Secret of the wrong type is refused, and waited on too.
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "regcred"},
		Data: map[string][]byte{"password": []byte(pass)}}
	if err := env.Client.Create(ctx, opaque); err != nil {
		t.Fatal(err)
	}
	got = waitSynchronizedReason(t, key, "InvalidImagePullSecret", "kubernetes.io/dockerconfigjson")
	waitEvent(t, got, "InvalidImagePullSecret")
	if err := env.Client.Delete(ctx, opaque); err != nil {
		t.Fatal(err)
	}

	// (2) The right type with a wrong password: the registry refuses it.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "regcred"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(reg.Host, user, wrong)}}
	eventually(t, time.Minute, "regcred recreated as dockerconfigjson", func() (bool, string) {
		err := env.Client.Create(ctx, secret)
		return err == nil, fmt.Sprint(err)
	})
	defer func() { _ = env.Client.Delete(ctx, secret) }()
	got = waitPullBackOff(t, key, dataRef, "refused the image pull secret's credentials")
	if got.Status.Phase != vmletv1.Scheduled {
		t.Errorf("a VMI whose pull secret is refused is %s, want Scheduled", got.Status.Phase)
	}
	waitEvent(t, got, "ErrImagePull")
	refused := reg.Refused()

	// (3) The password fixed: the next try pulls both images and the guest boots.
	secret.Data = map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(reg.Host, user, pass)}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 3*time.Minute)
	t.Logf("password fixed → VMI Ready in %s; the registry answered %d requests with 401", time.Since(t0).Round(time.Millisecond), refused)
	if running.Status.Phase != vmletv1.Running {
		t.Errorf("phase %s, want Running", running.Status.Phase)
	}
	waitSerial(t, consoleLog(running), testguest.MarkerReady)
	noSecretShown(t, running, pass, wrong, base64.StdEncoding.EncodeToString([]byte(user+":"+wrong)))

	t0 = time.Now()
	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	t.Logf("deleted in %s", time.Since(t0).Round(time.Millisecond))
	assertNothingLeft(t, string(vmi.UID), int(running.Status.Launcher.PID))
}

// dockerConfig is a .dockerconfigjson with one login for host, in the "auth" field.
func dockerConfig(host, user, pass string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	return fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth)
}

// waitSynchronizedReason waits for Synchronized=False with reason and a message containing
// sub.
func waitSynchronizedReason(t *testing.T, key client.ObjectKey, reason, sub string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, key.Name+" Synchronized=False "+reason, func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, sub), summary(v)
	})
	return got
}

// noSecretShown fails if a condition or Event of vmi holds one of the secrets.
func noSecretShown(t *testing.T, vmi *vmletv1.VirtualMachineInstance, secrets ...string) {
	t.Helper()
	var l eventsv1.EventList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(vmi.Namespace)); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range l.Items {
		if e.Regarding.UID == vmi.UID {
			texts = append(texts, e.Note)
		}
	}
	for _, c := range vmi.Status.Conditions {
		texts = append(texts, c.Message)
	}
	for _, s := range texts {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("a secret is shown: %q", s)
			}
		}
	}
	t.Logf("%d condition messages and Events checked for the secret", len(texts))
}
