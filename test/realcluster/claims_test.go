package realcluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/podruntime"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/realcluster"
)

// TestRealClusterClaims: vmlet's launcher pod contract for claims on a real kubelet. A local
// Filesystem PersistentVolume (a folder) and a local Block one (a loop device) are bound to
// their claims by the real kube-controller-manager; launcherpod.ResolveClaim resolves the
// bound claims read back from the API server, launcherpod.Build makes the launcher pod (the
// API server validates it) and the real kubelet + containerd mount the folder at its node path
// and map the device at its device path; the probe standing in for the launcher writes through
// both (the folder's disk.img as the launcher's user 107, the device as root, since a
// volumeDevice node is root's until the node agent hands it over), and the writes land in the
// node's folder and on the device. The agent's hand-over (podruntime.OwnDeviceNodes) changes
// the device node inside a running container, not the node's.
func TestRealClusterClaims(t *testing.T) {
	prereq.Root(t)
	for _, b := range []string{"containerd", "runc", "ctr", "iptables", "losetup"} {
		if _, err := exec.LookPath(b); err != nil {
			prereq.Missing(t, b+" not on PATH (make deps installs containerd, runc, containernetworking-plugins)")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	pause, err := realcluster.PauseTar(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := realcluster.Binaries(os.Stderr); err != nil {
		t.Fatal(err)
	}
	probe := probeTar(t)
	c, err := realcluster.Start(ctx, realcluster.Options{PauseTar: pause, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.Kubectl(context.Background(), "get", "events", "-A")
			t.Logf("events:\n%s", out)
			for _, p := range []string{"launcher-fs", "launcher-blk"} {
				out, _ = c.Kubectl(context.Background(), "logs", p)
				st, _ := c.Kubectl(context.Background(), "get", "pod", p, "-o", "jsonpath={.status.containerStatuses}")
				t.Logf("%s: logs %q status %s", p, out, st)
			}
		}
		// TestRealCluster checks that Stop leaves nothing; not here, since another package's
		// cluster waiting for the lock starts the moment this one stops.
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, probe); err != nil {
		t.Fatal(err)
	}
	// The controller's launcher pods select nodes whose agent beats; there is no agent here.
	if _, err := c.Kubectl(ctx, "label", "node", c.NodeName, launcherpod.NodeLabelSchedulable+"=true"); err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} { // the launcher's user passes through
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pvDir := filepath.Join(root, "pv-fs")
	if err := os.Mkdir(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(pvDir, "disk.img") // as the node agent leaves it: sparse, the launcher's
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 60<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(img, launcherpod.DefaultRunAsUser, launcherpod.DefaultRunAsGroup); err != nil {
		t.Fatal(err)
	}
	dev := loopdev.Attach(t, filepath.Join(root, "block.img"), "", 8<<20)
	// The claim's device starts as a fresh node's would (loopdev restores it afterwards).
	if err := os.Chown(dev, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dev, 0o660); err != nil {
		t.Fatal(err)
	}

	makePV(ctx, t, cs, c.NodeName, "vmlet-pv-fs", pvDir, corev1.PersistentVolumeFilesystem, "64Mi")
	makePV(ctx, t, cs, c.NodeName, "vmlet-pv-blk", dev, corev1.PersistentVolumeBlock, "8Mi")
	claims := map[string]launcherpod.Claim{}
	for name, mode := range map[string]corev1.PersistentVolumeMode{"fs-claim": corev1.PersistentVolumeFilesystem, "blk-claim": corev1.PersistentVolumeBlock} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("vmlet-local"), VolumeMode: &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("4Mi")}},
		}}
		if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		var bound *corev1.PersistentVolumeClaim
		poll.Until(t, 2*time.Minute, name+" bound by the controller-manager", func() (bool, string) {
			bound, err = cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return bound.Status.Phase == corev1.ClaimBound, string(bound.Status.Phase)
		})
		t.Logf("FIGURE %s bound in %s to %s", name, time.Since(t0).Round(time.Millisecond), bound.Spec.VolumeName)
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, bound.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl, problem := launcherpod.ResolveClaim(launcherpod.ClaimUse{Name: name}, "default", bound, pv, launcherpod.Options{})
		if problem != nil {
			t.Fatalf("resolve %s: %s: %s", name, problem.Reason, problem.Message)
		}
		claims[name] = cl
	}
	if got := claims["fs-claim"]; got.Path != pvDir || got.CapacityBytes != 64<<20 || got.Mode != corev1.PersistentVolumeFilesystem {
		t.Errorf("fs claim %+v", got)
	}
	if got := claims["blk-claim"]; got.Path != dev || got.Mode != corev1.PersistentVolumeBlock {
		t.Errorf("block claim %+v", got)
	}

	// One launcher pod per claim: the filesystem one as the launcher's user, the block one as
	// root (see above), each with the probe in place of the launcher.
	run := func(name string, claim launcherpod.Claim, uid int64, target, text string) {
		t.Helper()
		vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("00000000-0000-4000-8000-0000000000" + map[string]string{"fs": "01", "blk": "02"}[name])},
			// No pod interface: the pod then asks for no devices.vmlet.dev/tun, which only the
			// node agent's device plugin (not running in this test) advertises.
			Spec: vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptr.To(resource.MustParse("64Mi"))},
				Devices: vmletv1.Devices{AutoattachPodInterface: ptr.To(false)}}}}
		o := launcherpod.Options{Image: probeImage, AllowEmulation: true, LauncherRoot: filepath.Join(root, "l"), VolumeRoot: filepath.Join(root, "v"),
			Args: controllers.DefaultLauncherArgs, DomainName: translate.DomainName, RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid)}
		for _, d := range []string{launcherpod.HostRunDir(o.LauncherRoot, vmi.UID), launcherpod.HostVolumeDir(o.VolumeRoot, vmi.UID)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		pod, err := launcherpod.Build(vmi, o, []launcherpod.Claim{claim})
		if err != nil {
			t.Fatal(err)
		}
		pod.OwnerReferences = nil // no VMI object here
		pod.GenerateName, pod.Name = "", "launcher-"+name
		ctr := &pod.Spec.Containers[0]
		ctr.ImagePullPolicy, ctr.Command, ctr.Args = corev1.PullNever, []string{"/probe"}, []string{"write", target, text}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		waitPhase(t, cs, pod.Name, corev1.PodRunning)
		t.Logf("FIGURE launcher pod with the %s claim Running in %s", name, time.Since(t0).Round(time.Millisecond))
	}
	run("fs", claims["fs-claim"], launcherpod.DefaultRunAsUser, img, "VMLET-REAL-KUBELET-FS")
	run("blk", claims["blk-claim"], 0, dev, "VMLET-REAL-KUBELET-BLK")
	// The node agent's step for a launcher: the block device node inside a running container
	// (root's, a copy of the node's) is handed to the launcher's user; the node's own stays.
	srv := pod("blk-serve", []string{"serve", ":8080", "/tmp"}, nil, nil)
	srv.Spec.Volumes = []corev1.Volume{{Name: "blk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "blk-claim"}}}}
	srv.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "blk", DevicePath: "/dev/vmlet-claim"}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, srv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, cs, srv.Name, corev1.PodRunning)
	var pid int
	poll.Until(t, time.Minute, "the serving probe's process", func() (bool, string) {
		out, _ := exec.Command("pgrep", "-f", "^/probe serve :8080 /tmp$").Output()
		f := strings.Fields(string(out))
		if len(f) != 1 {
			return false, string(out)
		}
		pid, err = strconv.Atoi(f[0])
		return err == nil, string(out)
	})
	if err := podruntime.OwnDeviceNodes(pid, []string{"/dev/vmlet-claim"}, process.User{UID: launcherpod.DefaultRunAsUser, GID: launcherpod.DefaultRunAsGroup}); err != nil {
		t.Fatal(err)
	}
	var inPod, onNode syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/root/dev/vmlet-claim", pid), &inPod); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dev, &onNode); err != nil {
		t.Fatal(err)
	}
	if inPod.Uid != launcherpod.DefaultRunAsUser || inPod.Gid != launcherpod.DefaultRunAsGroup || inPod.Mode&0o600 != 0o600 || inPod.Rdev != onNode.Rdev {
		t.Errorf("device node in the pod: uid %d gid %d mode %o rdev %x; want the launcher's, rw, rdev %x", inPod.Uid, inPod.Gid, inPod.Mode, inPod.Rdev, onNode.Rdev)
	}
	t.Logf("device node in the pod %d:%d %o, on the node %d:%d %o", inPod.Uid, inPod.Gid, inPod.Mode&0o7777, onNode.Uid, onNode.Gid, onNode.Mode&0o7777)
	if onNode.Uid != 0 || onNode.Gid != 0 {
		t.Errorf("the node's %s became %d:%d", dev, onNode.Uid, onNode.Gid)
	}
	if err := podruntime.OwnDeviceNodes(pid, []string{"/etc/hostname"}, process.User{UID: 107, GID: 107}); err == nil {
		t.Error("OwnDeviceNodes handed over a file that is not a block device")
	}

	// Read back on the node: the folder's disk.img, and the device itself.
	for _, path := range []string{img, dev} {
		want := map[string]string{img: "VMLET-REAL-KUBELET-FS", dev: "VMLET-REAL-KUBELET-BLK"}[path]
		poll.Until(t, time.Minute, "the pod's write in "+path, func() (bool, string) {
			f, err := os.Open(path)
			if err != nil {
				return false, err.Error()
			}
			defer f.Close()
			b := make([]byte, len(want))
			_, _ = f.Read(b)
			return string(b) == want, string(b)
		})
	}
}

func makePV(ctx context.Context, t *testing.T, cs kubernetes.Interface, node, name, path string, mode corev1.PersistentVolumeMode, size string) {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: "vmlet-local", VolumeMode: &mode, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
