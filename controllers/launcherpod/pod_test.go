package launcherpod_test

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
)

var update = flag.Bool("update", false, "rewrite testdata/*.yaml golden files from Build's output")

func testVMI(mutate func(*vmletv1.VirtualMachineInstance)) *vmletv1.VirtualMachineInstance {
	guest := resource.MustParse("256Mi")
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "0b5e2c1a-1111-2222-3333-444455556666"},
		Spec: vmletv1.VirtualMachineInstanceSpec{
			Domain: vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: &guest}},
		},
	}
	if mutate != nil {
		mutate(vmi)
	}
	return vmi
}

func opts(mutate func(*launcherpod.Options)) launcherpod.Options {
	o := launcherpod.Options{AllowEmulation: true, TCGCacheMiB: launcherpod.DefaultTCGCacheMiB, Args: controllers.DefaultLauncherArgs, DomainName: translate.DomainName,
		ImageCache: launcherpod.DefaultImageCache}
	if mutate != nil {
		mutate(&o)
	}
	return o
}

// TestBuildGolden compares whole pods with testdata/<case>.yaml (go test -update rewrites them).
func TestBuildGolden(t *testing.T) {
	cases := []struct {
		name string
		vmi  func(*vmletv1.VirtualMachineInstance)
		opts func(*launcherpod.Options)
	}{
		{"defaults", nil, nil},
		{"kvm-only-selector-grace", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.NodeSelector = map[string]string{"zone": "a", launcherpod.NodeLabelSchedulable: "false"}
			v.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 2, Cores: 2}
		}, func(o *launcherpod.Options) {
			o.AllowEmulation, o.Image, o.ImageCache = false, "registry.example/launcher:v1", ""
			o.LauncherRoot, o.VolumeRoot = "/run/vl", "/srv/vols"
		}},
		{"cpu-request-limit-overcommit", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = nil
			v.Spec.Domain.Resources = vmletv1.ResourceRequirements{
				Requests:                vmletv1.ResourceList{"memory": resource.MustParse("1Gi"), "cpu": resource.MustParse("1500m")},
				Limits:                  vmletv1.ResourceList{"cpu": resource.MustParse("1")},
				OvercommitGuestOverhead: true,
			}
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod, err := launcherpod.Build(testVMI(c.vmi), opts(c.opts), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("pod differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

// TestTCGCacheBudget: under emulation the pod budgets the nodes' whole translation cache, and
// QEMU's own default (1 GiB) when the nodes give none (--tcg-cache-mib=0); KVM-only pods none.
func TestTCGCacheBudget(t *testing.T) {
	limit := func(mutate func(*launcherpod.Options)) int64 {
		t.Helper()
		pod, err := launcherpod.Build(testVMI(nil), opts(mutate), nil)
		if err != nil {
			t.Fatal(err)
		}
		return pod.Spec.Containers[0].Resources.Limits.Memory().Value()
	}
	kvm := limit(func(o *launcherpod.Options) { o.AllowEmulation = false })
	for _, c := range []struct {
		tcg  int
		want int64
	}{
		{launcherpod.DefaultTCGCacheMiB, launcherpod.DefaultTCGCacheMiB << 20},
		{16, 16 << 20},
		{0, launcherpod.QEMUDefaultTCGCacheMiB << 20},
	} {
		if got := limit(func(o *launcherpod.Options) { o.TCGCacheMiB = c.tcg }) - kvm; got != c.want {
			t.Errorf("tcg-cache-mib %d: pod memory %d MiB above the KVM-only pod's, want %d MiB", c.tcg, got>>20, c.want>>20)
		}
	}
}

// TestContract pins what the node agent's pod runtime relies on, field by field.
func TestContract(t *testing.T) {
	tols := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule}}
	vmi := testVMI(func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.NodeSelector = map[string]string{"zone": "a"}
		v.Spec.Tolerations = tols
	})
	pod, err := launcherpod.Build(vmi, opts(func(o *launcherpod.Options) { o.LauncherRoot, o.VolumeRoot = "/lr", "/vr" }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "ns1" || pod.GenerateName != "vmlet-launcher-vm1-" || pod.Name != "" {
		t.Errorf("namespace/generateName/name = %q/%q/%q", pod.Namespace, pod.GenerateName, pod.Name)
	}
	if o := pod.OwnerReferences; len(o) != 1 || o[0].UID != vmi.UID || o[0].Kind != "VirtualMachineInstance" ||
		o[0].APIVersion != "vmlet.dev/v1alpha1" || !*o[0].Controller || !*o[0].BlockOwnerDeletion {
		t.Errorf("ownerReferences = %+v", o)
	}
	wantLabels := map[string]string{"vmlet.dev/vmi-uid": string(vmi.UID), "vmlet.dev/vmi": "vm1", "app.kubernetes.io/name": "vmlet-launcher"}
	if !equalMaps(pod.Labels, wantLabels) || pod.Annotations["vmlet.dev/vmi-name"] != "vm1" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if !equalMaps(pod.Spec.NodeSelector, map[string]string{"zone": "a", "vmlet.dev/schedulable": "true"}) {
		t.Errorf("nodeSelector = %v", pod.Spec.NodeSelector)
	}
	if !reflect.DeepEqual(pod.Spec.Tolerations, tols) {
		t.Errorf("tolerations = %+v, want the VMI's %+v", pod.Spec.Tolerations, tols)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.AutomountServiceAccountToken ||
		*pod.Spec.TerminationGracePeriodSeconds != 45 {
		t.Errorf("restartPolicy %s automount %v grace %d", pod.Spec.RestartPolicy, *pod.Spec.AutomountServiceAccountToken, *pod.Spec.TerminationGracePeriodSeconds)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	// --name is the domain name the agent syncs (the launcher refuses any other).
	// --run-dir is the node's run folder, mounted at the same path (the domain spec names
	// sockets and logs by node paths).
	wantArgs := controllers.DefaultLauncherArgs("/lr/"+string(vmi.UID), "ns1_vm1", launcherpod.DefaultGracePeriod)
	if c.Name != "launcher" || c.Image != launcherpod.DefaultImage || strings.Join(c.Command, " ") != "/usr/bin/vmlet-launcher" ||
		strings.Join(c.Args, " ") != strings.Join(wantArgs, " ") {
		t.Errorf("container %s image %s command %v args %v", c.Name, c.Image, c.Command, c.Args)
	}
	// Not privileged, no capabilities, no privilege escalation (no_new_privs), as the
	// unprivileged launcher user (107:107) by default: KubeVirt's non-root virt-launcher.
	if sc := c.SecurityContext; sc == nil || *sc.Privileged || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("securityContext = %+v", sc)
	}
	if ps := pod.Spec.SecurityContext; ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != 107 || ps.RunAsGroup == nil ||
		*ps.RunAsGroup != 107 || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || len(ps.SupplementalGroups) != 0 {
		t.Errorf("pod securityContext = %+v, want runAsUser/runAsGroup 107, runAsNonRoot", ps)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	// The agent makes the run and storage folders for the launcher's user: the pod waits for
	// them (Directory); the image cache is the node's.
	for _, v := range pod.Spec.Volumes {
		hp := v.HostPath
		want := corev1.HostPathDirectory
		if v.Name == "image-cache" {
			want = corev1.HostPathDirectoryOrCreate
		}
		if hp == nil || *hp.Type != want {
			t.Errorf("volume %s is not a %s hostPath: %+v", v.Name, want, v.VolumeSource)
			continue
		}
		switch v.Name {
		case "launcher-run":
			if hp.Path != "/lr/"+string(vmi.UID) || mounts[v.Name] != hp.Path {
				t.Errorf("launcher-run: %s at %s", hp.Path, mounts[v.Name])
			}
		case "vmi-storage":
			if hp.Path != "/vr/"+string(vmi.UID) || mounts[v.Name] != hp.Path {
				t.Errorf("vmi-storage: %s at %s", hp.Path, mounts[v.Name])
			}
		}
	}
	if got := launcherpod.HostSocket("/lr", vmi.UID); got != "/lr/"+string(vmi.UID)+"/launcher.sock" {
		t.Errorf("HostSocket = %s", got)
	}
	// The heartbeat's node labels, repeated in launcherpod to keep it free of package controllers.
	if launcherpod.NodeLabelSchedulable != controllers.LabelSchedulable || launcherpod.NodeLabelKVM != controllers.LabelKVM {
		t.Error("node label constants differ from package controllers'")
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 100)
	for _, c := range []struct{ name, prefix string }{
		{"vm1", "vmlet-launcher-vm1-"},
		{long, "vmlet-launcher-" + strings.Repeat("a", 42) + "-"},
		{strings.Repeat("a", 41) + "-b", "vmlet-launcher-" + strings.Repeat("a", 41) + "-"},
		{strings.Repeat("a", 41) + ".b", "vmlet-launcher-" + strings.Repeat("a", 41) + "-"},
	} {
		got := launcherpod.GenerateName(c.name)
		if got != c.prefix {
			t.Errorf("GenerateName(%q) = %q, want %q", c.name, got, c.prefix)
		}
		if errs := validation.IsDNS1123Subdomain(got + "abcde"); len(errs) > 0 || len(got)+5 > 63 {
			t.Errorf("generated name %q invalid: %v", got+"abcde", errs)
		}
	}
	if l := launcherpod.Labels(long, "u"); l[launcherpod.LabelVMI] != "" || l[launcherpod.LabelVMIUID] != "u" {
		t.Errorf("Labels(long) = %v: the name label must be omitted", l)
	}
}

func TestBuildErrors(t *testing.T) {
	if _, err := launcherpod.Build(testVMI(nil), launcherpod.Options{}, nil); err == nil {
		t.Error("Build without Args: no error")
	}
	huge := resource.MustParse("8Ei")
	if _, err := launcherpod.Build(testVMI(func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = &huge }), opts(nil), nil); err == nil {
		t.Error("Build with 8Ei of guest memory: no error")
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
