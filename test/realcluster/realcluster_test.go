package realcluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/vmlet/vmlet/internal/imagebuild"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/realcluster"
)

const probeImage = "vmlet.dev/realcluster-probe:test"

// probeTar builds the probe program static and packs it as a one-file image.
func probeTar(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	img, err := imagebuild.Build(imagebuild.Spec{
		Ref:        probeImage,
		Files:      []imagebuild.File{{Source: bin, Path: "/probe", Mode: 0o755}},
		Entrypoint: []string{"/probe"},
	}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(dir, "probe.tar")
	if err := imagebuild.WriteArchive(tar, probeImage, img); err != nil {
		t.Fatal(err)
	}
	return tar
}

func pod(name string, args []string, vols []corev1.Volume, mounts []corev1.VolumeMount) *corev1.Pod {
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       vols,
			Containers: []corev1.Container{{
				Name: "probe", Image: probeImage, ImagePullPolicy: corev1.PullNever,
				Args: args, VolumeMounts: mounts,
			}},
		},
	}
}

func hostPathVol(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}

func waitPhase(t *testing.T, cs kubernetes.Interface, name string, want corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	poll.Until(t, 3*time.Minute, "pod "+name+" "+string(want), func() (bool, string) {
		var err error
		p, err = cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed && want != corev1.PodFailed {
			t.Fatalf("pod %s failed: %+v", name, p.Status)
		}
		return p.Status.Phase == want, string(p.Status.Phase) + " " + p.Status.Message
	})
	return p
}

func TestRealCluster(t *testing.T) {
	prereq.Root(t)
	for _, b := range []string{"containerd", "runc", "ctr", "iptables"} {
		if _, err := exec.LookPath(b); err != nil {
			prereq.Missing(t, b+" not on PATH (make deps installs containerd, runc, containernetworking-plugins)")
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		prereq.Missing(t, "/usr/lib/cni/bridge missing (make deps installs containernetworking-plugins)")
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

	t0 := time.Now()
	c, err := realcluster.Start(ctx, realcluster.Options{PauseTar: pause, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	startTime := time.Since(t0) - c.LockWait
	stopped := false
	t.Cleanup(func() {
		if t.Failed() && !stopped {
			out, _ := c.Kubectl(context.Background(), "get", "events", "-A")
			t.Logf("events:\n%s", out)
			c.DumpLogs(os.Stderr, 40)
		}
		if !stopped {
			_ = c.Stop()
		}
	})
	t.Logf("FIGURE realcluster start: %s (cached binaries, fresh state; waited %s for the lock)", startTime.Round(time.Millisecond), c.LockWait.Round(time.Millisecond))
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Fatalf("node %s not Ready: %+v", c.NodeName, n.Status.Conditions)
	}
	if err := c.ImportImage(ctx, probe); err != nil {
		t.Fatal(err)
	}

	// A server pod scheduled by kube-scheduler, with an IP from the CNI bridge.
	marker := t.TempDir()
	srv := pod("server", []string{"serve", ":8080", "/marker"}, []corev1.Volume{hostPathVol("marker", marker)},
		[]corev1.VolumeMount{{Name: "marker", MountPath: "/marker"}})
	srv.Labels = map[string]string{"app": "probe-server"}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, srv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitPhase(t, cs, "server", corev1.PodRunning)
	if s.Spec.NodeName != c.NodeName {
		t.Fatalf("server scheduled to %q, want %q", s.Spec.NodeName, c.NodeName)
	}
	ip, err := netip.ParseAddr(s.Status.PodIP)
	if err != nil || !realcluster.PodSubnet.Contains(ip) {
		t.Fatalf("server pod IP %q not in the pod subnet %s", s.Status.PodIP, realcluster.PodSubnet)
	}

	// A second pod reaches it over the pod network.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("client", []string{"get", "http://" + ip.String() + ":8080/"}, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cl := waitPhase(t, cs, "client", corev1.PodSucceeded)
	if cl.Status.PodIP == s.Status.PodIP {
		t.Fatalf("client and server share IP %s", cl.Status.PodIP)
	}
	logs, err := c.Kubectl(ctx, "logs", "client")
	if err != nil || !strings.Contains(string(logs), "probe server") {
		t.Fatalf("client logs (through the API server and the kubelet): %v: %q", err, logs)
	}

	// A Service in front of it (kube-proxy's rules): reached at its cluster IP from this host
	// (where the API server runs: webhooks and aggregated APIs are Services) and from a pod.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: srv.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if svc, err = cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svcURL := "http://" + svc.Spec.ClusterIP + ":80/"
	poll.Until(t, time.Minute, "the Service from the host", func() (bool, string) {
		// A new connection each time: one made before kube-proxy's rule left this machine
		// (its default route) and would be kept alive.
		hc := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get(svcURL)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "probe server"), fmt.Sprintf("%s %q", resp.Status, b)
	})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("svcclient", []string{"get", svcURL}, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, cs, "svcclient", corev1.PodSucceeded)
	if logs, err := c.Kubectl(ctx, "logs", "svcclient"); err != nil || !strings.Contains(string(logs), "probe server") {
		t.Fatalf("pod → Service %s: %v: %q", svcURL, err, logs)
	}

	// A pod reaches the API server the in-cluster way: the kubernetes Service, the
	// service-account token (token controller) and the root CA (controller-manager).
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("incluster", []string{"apiserver", "/version"}, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, cs, "incluster", corev1.PodSucceeded)
	if logs, err := c.Kubectl(ctx, "logs", "incluster"); err != nil || !strings.Contains(string(logs), `"gitVersion"`) {
		t.Fatalf("in-cluster /version: %v: %q", err, logs)
	}

	// A hostPath PersistentVolume bound to a claim by the real controller-manager, in a pod.
	pvDir := t.TempDir()
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "realcluster-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:              "manual",
			VolumeMode:                    &fs,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := "manual"
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeMode:       &fs,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("512Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "claim bound", func() (bool, string) {
		got, err := cs.CoreV1().PersistentVolumeClaims("default").Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == corev1.ClaimBound && got.Spec.VolumeName == pv.Name, string(got.Status.Phase)
	})
	writer := pod("writer", []string{"write", "/data/hello", "from a pod"}, []corev1.Volume{{Name: "data",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		[]corev1.VolumeMount{{Name: "data", MountPath: "/data"}})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, writer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, cs, "writer", corev1.PodRunning)
	poll.Until(t, time.Minute, "file written through the claim", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(pvDir, "hello"))
		return err == nil && string(b) == "from a pod", string(b)
	})

	// Deleting the server honours its grace period: SIGTERM, the 2 s shutdown, then gone.
	del := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, "server", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "server pod gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "server", metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there"
	})
	gone := time.Since(del)
	b, err := os.ReadFile(filepath.Join(marker, "terminated"))
	if err != nil {
		t.Fatalf("the server did not finish its SIGTERM handler (no marker): %v", err)
	}
	if gone < 2*time.Second || gone > 30*time.Second {
		t.Fatalf("server pod gone %s after delete, want between its 2 s shutdown and the 30 s grace period", gone)
	}
	t.Logf("FIGURE realcluster graceful delete: %s (marker %s)", gone.Round(time.Millisecond), b)

	// A crash of the process that ran Start (daemons dead, pods, mounts, chains left): the next
	// Start removes the stale state and brings up a working cluster.
	killed, crashLeft := c.CrashForTest()
	t.Logf("crash: killed %d daemons; %d things left behind (pods, mounts, chains, cgroups, ...)", killed, len(crashLeft))
	for _, kind := range []string{"process", "mount", "cgroup", "iptables chain", "link", "folder"} {
		if !slices.ContainsFunc(crashLeft, func(s string) bool { return strings.HasPrefix(s, kind) }) {
			t.Fatalf("the crash left no %s behind: the recovery below would prove less than it says; left: %v", kind, crashLeft)
		}
	}
	t2 := time.Now()
	c, err = realcluster.Start(ctx, realcluster.Options{PauseTar: pause, Log: os.Stderr})
	if err != nil {
		stopped = true
		t.Fatal(err)
	}
	t.Logf("FIGURE realcluster start after a crash (stale state removed): %s", (time.Since(t2) - c.LockWait).Round(time.Millisecond))
	if cs, err = kubernetes.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "writer", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the crashed cluster's pod is still known after the restart: %v", err)
	}
	if err := c.ImportImage(ctx, probe); err != nil {
		t.Fatal(err)
	}
	again := pod("again", []string{"serve", ":8080", "/marker"}, []corev1.Volume{hostPathVol("marker", t.TempDir())},
		[]corev1.VolumeMount{{Name: "marker", MountPath: "/marker"}})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, cs, "again", corev1.PodRunning)

	// Stop leaves nothing.
	t1 := time.Now()
	left, err := c.StopAndResidue()
	stopped = true
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE realcluster stop: %s", time.Since(t1).Round(time.Millisecond))
	if len(left) > 0 {
		t.Fatalf("left after Stop:\n%s", strings.Join(left, "\n"))
	}
}
