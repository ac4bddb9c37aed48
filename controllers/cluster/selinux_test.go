package cluster_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
)

// TestSELinuxLauncherType: vmlet-config's selinuxLauncherType becomes the launcher pods'
// seLinuxOptions.type (KubeVirt's selinuxLauncherType); pods made without it have none.
func TestSELinuxLauncherType(t *testing.T) {
	startController(t)
	ctx := context.Background()
	ns := namespace(t)
	before := waitPod(t, newVMI(t, ns, "plain", nil))
	if s := before.Spec.SecurityContext.SELinuxOptions; s != nil {
		t.Errorf("seLinuxOptions %+v without selinuxLauncherType", s)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: migration.ConfigNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: migration.ConfigNamespace, Name: migration.ConfigName},
		Data: map[string]string{launcherpod.ConfigKeySELinuxLauncherType: "virt_launcher.process"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	pod := waitPod(t, newVMI(t, ns, "typed", nil))
	if s := pod.Spec.SecurityContext.SELinuxOptions; s == nil || s.Type != "virt_launcher.process" || s.Level != "" {
		t.Errorf("seLinuxOptions %+v, want type virt_launcher.process and the runtime's level", s)
	}
}
