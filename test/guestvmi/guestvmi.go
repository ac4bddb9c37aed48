package guestvmi

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/testguest"
)

// Paths of the kernel and initrd inside the image.
const (
	KernelPath = "/vmlinuz"
	InitrdPath = "/initramfs.gz"
)

// VMI is a VMI in namespace default that boots the test guest from image by kernelBoot, with
// 128 MiB and a 30 s grace period.
func VMI(name, image string) *vmletv1.VirtualMachineInstance {
	mem := resource.MustParse("128Mi")
	grace := int64(30)
	return &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: vmletv1.VirtualMachineInstanceSpec{
			TerminationGracePeriodSeconds: &grace,
			Domain: vmletv1.DomainSpec{
				Memory: &vmletv1.Memory{Guest: &mem},
				Firmware: &vmletv1.Firmware{KernelBoot: &vmletv1.KernelBoot{
					KernelArgs: testguest.BaseCmdline,
					Container:  &vmletv1.KernelBootContainer{Image: image, KernelPath: KernelPath, InitrdPath: InitrdPath},
				}},
			},
		},
	}
}

// WriteLayout writes the test guest as a kernelBoot image into an OCI layout in dir/guest-layout
// and returns the reference to pull it by ("oci:<dir>:test").
func WriteLayout(t testing.TB, dir string) string {
	t.Helper()
	ref, err := Layout(testguest.Assets(t), dir)
	if err != nil {
		t.Fatalf("write the test guest's image: %v", err)
	}
	return ref
}

// Layout is WriteLayout for callers that report errors themselves (e.g. once per package).
func Layout(files testguest.Files, dir string) (string, error) {
	img, err := images.KernelBoot(files.Kernel, KernelPath, files.Initrd, InitrdPath)
	if err != nil {
		return "", err
	}
	return images.WriteLayout(filepath.Join(dir, "guest-layout"), img, "test")
}
