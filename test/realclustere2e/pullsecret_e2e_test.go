package realclustere2e_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/realcluster"
)

// TestContainerDiskPullSecret: on the real cluster, the agent (in its pod, on the CNI pod
// network) pulls a containerDisk from a private registry (basic auth, on the pod network's
// gateway) with the VMI's imagePullSecret, made as a user makes one (`kubectl create secret
// docker-registry`). Before the Secret exists the VMI waits with KubeVirt's reason; once it
// does, the guest boots from the image the registry served. No credential shows in the VMI.
func TestContainerDiskPullSecret(t *testing.T) {
	need(t)
	t.Parallel()
	const user, pass = "vmlet", "real-Cluster-4711"
	reg := storagetest.StartRegistryAt(t, realcluster.Gateway.String()+":0")
	reg.RequireAuth(user, pass)
	ref := reg.Push(t, "private/testguest-disk:1", layoutImage(t, filepath.Join(nodeState, "sources", "testguest-disk")))

	name, secret := "pullsecret-"+suffix(), "regcred-"+suffix()
	createVMI(t, name, `spec:
  domain:
    memory: {guest: 128Mi}
    devices: {}
  volumes:
  - name: root
    containerDisk: {image: `+ref+`, imagePullSecret: `+secret+`}
`)
	waitVMI(t, name, runningTimeout, "Synchronized=False SecretNotFound", func(v *vmletv1.VirtualMachineInstance) bool {
		for _, c := range v.Status.Conditions {
			if c.Type == "Synchronized" && c.Status == "False" && c.Reason == "SecretNotFound" && strings.Contains(c.Message, secret) {
				return true
			}
		}
		return false
	})
	if n := reg.Gets("manifests"); n != 0 {
		t.Errorf("the registry was asked for %d manifests before the pull secret existed", n)
	}

	kubectl(t, "", "create", "secret", "docker-registry", secret, "-n", "default",
		"--docker-server="+reg.Host, "--docker-username="+user, "--docker-password="+pass)
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: secret}})
	})
	vmi := waitBooted(t, name)
	scheduled(t, vmi)
	// The manifest came from this registry, with the Secret's login; its layers may already be
	// in the node's image cache (content-addressed, shared with the stand-in images).
	if reg.Gets("manifests") == 0 {
		t.Errorf("the guest booted but the registry served no manifest (%d blobs)", reg.Gets("blobs"))
	}
	if raw := kubectl(t, "", "get", "vmi", name, "-n", "default", "-o", "yaml"); strings.Contains(raw, pass) {
		t.Error("the VMI shows the registry password")
	}
	t.Logf("private registry %s: %d requests refused (no credentials), the guest booted with %s", reg.Host, reg.Refused(), secret)
	deleteVMI(t, name)
}

// layoutImage is the one image of the OCI layout at dir (as hack/local-images.sh writes them).
func layoutImage(t testing.TB, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("OCI layout %s: %d manifests, want one", dir, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
