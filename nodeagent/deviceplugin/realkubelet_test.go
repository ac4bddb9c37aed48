package deviceplugin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/nodeagent/deviceplugin"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/realcluster"
)

// realCount is the devices per resource the plugin advertises in the real-kubelet test.
const realCount = 100

// TestDevicePluginRealKubelet runs the device plugin against a real kubelet (test/realcluster:
// kubelet + containerd + kube-scheduler on this machine): it registers, the Node's capacity and
// allocatable list the resources this node has (tun here; kvm not, since KVM is not usable on
// these machines; vhost-net only where /dev/vhost-net exists), a pod requesting
// devices.vmlet.dev/tun runs and its container has /dev/net/tun (a pod without the request has
// none), a pod requesting devices.vmlet.dev/kvm stays Pending with kube-scheduler's
// "Insufficient devices.vmlet.dev/kvm" (or runs with /dev/kvm where KVM is usable), and after a
// kubelet restart (which deletes the plugin sockets) the plugin registers again and new pods get
// the device.
func TestDevicePluginRealKubelet(t *testing.T) {
	prereq.Root(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	t0 := time.Now()
	c, err := realcluster.Start(ctx, realcluster.Options{Log: testWriter{t}})
	if err != nil {
		t.Fatalf("start the real cluster: %v", err)
	}
	t.Logf("real cluster up in %s", time.Since(t0).Round(time.Second))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the real cluster: %v", err)
		}
		if left := realcluster.Residue(realcluster.Options{}); len(left) > 0 {
			t.Errorf("left after the cluster stopped: %v", left)
		}
	})
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	facts := deviceplugin.Probe()
	t.Logf("this node: kvm %v (%s), tun %v, vhost-net %v", facts.KVM, devices.Probe().KVM.Reason, facts.Tun, facts.VhostNet)
	if !facts.Tun {
		t.Fatal("/dev/net/tun is not the tun device here: nothing to advertise")
	}
	// The kubelet's device manager listens at pluginapi.KubeletSocket whatever its --root-dir.
	dir := pluginapi.DevicePluginPath
	m, err := deviceplugin.New(deviceplugin.Options{Dir: dir, Count: realCount, Resources: deviceplugin.Select(facts), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancelPlugin := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(pctx) }()
	stopPlugin := sync.OnceFunc(func() {
		cancelPlugin()
		if err := <-done; err != nil {
			t.Errorf("plugin: %v", err)
		}
	})
	t.Cleanup(stopPlugin) // before the cluster stops (cleanups run last first)

	want := map[string]bool{deviceplugin.KVM.Name: facts.KVM, deviceplugin.Tun.Name: true, deviceplugin.VhostNet.Name: facts.VhostNet}
	t1 := time.Now()
	waitAdvertised(t, ctx, cs, c.NodeName, want)
	t.Logf("advertised on the Node %s after the plugin started", time.Since(t1).Round(time.Millisecond))

	tunPod := runPod(t, ctx, cs, "dp-tun", deviceplugin.Tun.Name)
	checkDevice(t, ctx, cs, tunPod, "/dev/net/tun", devices.MiscMajor, devices.TunMinor, true)
	plain := runPod(t, ctx, cs, "dp-plain", "")
	checkDevice(t, ctx, cs, plain, "/dev/net/tun", 0, 0, false)

	kvmPod := createPod(t, ctx, cs, "dp-kvm", deviceplugin.KVM.Name)
	if facts.KVM {
		waitRunning(t, ctx, cs, kvmPod)
		checkDevice(t, ctx, cs, kvmPod, "/dev/kvm", devices.MiscMajor, devices.KVMMinor, true)
	} else {
		var msg string
		poll.Until(t, 2*time.Minute, "kvm pod unschedulable", func() (bool, string) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, kvmPod, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled {
					msg = cond.Message
					return cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable &&
						strings.Contains(cond.Message, "Insufficient "+deviceplugin.KVM.Name), fmt.Sprintf("phase %s, %s %s: %s", p.Status.Phase, cond.Status, cond.Reason, cond.Message)
				}
			}
			return false, fmt.Sprintf("phase %s, no PodScheduled condition", p.Status.Phase)
		})
		t.Logf("kvm pod Pending: %s", msg)
	}

	// The kubelet restarts: it deletes every socket in its device-plugins folder (ours too)
	// and forgets its plugins; ours must serve again and register with the new kubelet.
	before := socketIDs(t, dir)
	if len(before) != len(deviceplugin.Select(facts)) {
		t.Fatalf("plugin sockets %v, want one per resource", before)
	}
	t2 := time.Now()
	restartKubelet(t, c)
	poll.Until(t, 3*time.Minute, "plugin sockets made again and registered with the new kubelet", func() (bool, string) {
		now := socketIDs(t, dir)
		for name, id := range before {
			if now[name] == "" || now[name] == id {
				return false, fmt.Sprintf("%s: %q, was %q", name, now[name], id)
			}
		}
		err := m.Check(nil)
		return err == nil, fmt.Sprint(err)
	})
	waitAdvertised(t, ctx, cs, c.NodeName, want)
	t.Logf("re-registered %s after the kubelet was stopped", time.Since(t2).Round(time.Millisecond))
	after := runPod(t, ctx, cs, "dp-tun-after-restart", deviceplugin.Tun.Name)
	checkDevice(t, ctx, cs, after, "/dev/net/tun", devices.MiscMajor, devices.TunMinor, true)
	checkDevice(t, ctx, cs, tunPod, "/dev/net/tun", devices.MiscMajor, devices.TunMinor, true) // kept running

	// The same plugin as the node agent runs it (`vmlet agent --runtime pod`, its default
	// --device-plugins): it takes the resources over (another device count tells it apart),
	// is ready only once registered, and pods get the device from it.
	stopPlugin()
	agent := runAgent(t, ctx, c)
	agent.waitReady(t, "/readyz/device-plugin")
	waitAdvertisedCount(t, ctx, cs, c.NodeName, want, agentCount)
	byAgent := runPod(t, ctx, cs, "dp-tun-agent", deviceplugin.Tun.Name)
	checkDevice(t, ctx, cs, byAgent, "/dev/net/tun", devices.MiscMajor, devices.TunMinor, true)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// waitAdvertised waits until the Node's capacity and allocatable have realCount of each
// resource want says the node has, and none of the others.
func waitAdvertised(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, want map[string]bool) {
	t.Helper()
	waitAdvertisedCount(t, ctx, cs, node, want, realCount)
}

func waitAdvertisedCount(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, want map[string]bool, count int64) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "node advertises the device plugin's resources", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		ok := true
		for name, has := range want {
			for what, l := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
				q, found := l[corev1.ResourceName(name)]
				seen = append(seen, fmt.Sprintf("%s %s=%s", what, name, q.String()))
				if has && (!found || q.Value() != count) || !has && found && !q.IsZero() {
					ok = false
				}
			}
		}
		return ok, strings.Join(seen, ", ")
	})
}

func createPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, device string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "c", Image: realcluster.PauseImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
	if device != "" {
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(device): resource.MustParse("1")}
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func runPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, device string) string {
	t.Helper()
	createPod(t, ctx, cs, name, device)
	waitRunning(t, ctx, cs, name)
	return name
}

func waitRunning(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "pod "+name+" Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s %s; events: %s", p.Status.Phase, p.Status.Message, podEvents(ctx, cs, name))
	})
}

// checkDevice looks into the pod's container (its process's root, from the host): path is the
// char device major:minor there, or (want false) does not exist.
func checkDevice(t *testing.T, ctx context.Context, cs kubernetes.Interface, pod, path string, major, minor uint32, want bool) {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID == "" {
		t.Fatalf("pod %s: container statuses %v", pod, p.Status.ContainerStatuses)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	pid := containerPID(t, id)
	var st unix.Stat_t
	err = unix.Stat(fmt.Sprintf("/proc/%d/root%s", pid, path), &st)
	switch {
	case !want && err == nil:
		t.Errorf("pod %s (no device requested): %s exists in its container", pod, path)
	case !want:
		t.Logf("pod %s (no device requested): no %s in its container (%v)", pod, path, err)
	case err != nil:
		t.Errorf("pod %s: %s in its container: %v", pod, path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor:
		t.Errorf("pod %s: %s is mode %o dev %d:%d, want char %d:%d", pod, path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), major, minor)
	default:
		t.Logf("pod %s: %s is char %d:%d in its container (pid %d)", pod, path, major, minor, pid)
	}
}

// containerPID is the host PID of the process of container id (the one process whose cgroup
// path ends in the container's ID: the kubelet's cgroupfs layout .../pod<uid>/<id>).
func containerPID(t *testing.T, id string) int {
	t.Helper()
	pid := findPID(t, func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			return false
		}
		return slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool { return strings.HasSuffix(l, "/"+id) })
	})
	if pid == 0 {
		t.Fatalf("no process in container %s", id)
	}
	return pid
}

// findPID is the first process of /proc that match says is the one; 0 if none is.
func findPID(t *testing.T, match func(pid int) bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && match(pid) {
			return pid
		}
	}
	return 0
}

// socketIDs tell the plugin sockets (vmlet-*.sock) in dir apart from new ones at the same
// paths: inode number and change time (a freed inode number may be reused at once).
func socketIDs(t *testing.T, dir string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	matches, _ := filepath.Glob(filepath.Join(dir, "vmlet-*.sock"))
	for _, p := range matches {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			ids[filepath.Base(p)] = fmt.Sprintf("%d@%d.%09d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
		}
	}
	return ids
}

// restartKubelet stops the cluster's kubelet (SIGTERM, waits until it is gone) and starts it
// again with the same command line and environment, logging to the cluster's kubelet.log;
// the cluster's Stop kills it like the first one (it names the cluster's folders).
func restartKubelet(t *testing.T, c *realcluster.Cluster) {
	t.Helper()
	pid, argv, env := findKubelet(t, c)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "kubelet gone", func() (bool, string) { return !poll.Alive(pid), fmt.Sprintf("pid %d alive", pid) })
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(c.KubeletRootDir), "logs", "kubelet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }() // reap
	t.Logf("kubelet %d stopped, started again as %d", pid, cmd.Process.Pid)
}

func findKubelet(t *testing.T, c *realcluster.Cluster) (int, []string, []string) {
	t.Helper()
	var argv []string
	pid := findPID(t, func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(b) == 0 {
			return false
		}
		argv = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		return filepath.Base(argv[0]) == "kubelet" && slices.Contains(argv, "--root-dir="+c.KubeletRootDir)
	})
	if pid == 0 {
		t.Fatalf("no kubelet with --root-dir=%s", c.KubeletRootDir)
	}
	eb, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range bytes.Split(bytes.TrimRight(eb, "\x00"), []byte{0}) {
		env = append(env, string(kv))
	}
	return pid, argv, env
}

// podEvents are the pod's events, oldest first (what kubectl describe pod shows).
func podEvents(ctx context.Context, cs kubernetes.Interface, name string) string {
	l, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range l.Items {
		out = append(out, fmt.Sprintf("%s %s (x%d): %s", e.Type, e.Reason, max(e.Count, 1), e.Message))
	}
	return strings.Join(out, "; ")
}

// agentCount is the agent's --device-plugin-count in the real-kubelet test.
const agentCount = 200

// agentProc is a running `vmlet agent`: its probe address; done is closed when it exited.
type agentProc struct {
	health string
	done   chan struct{}
	err    error // once done
}

// runAgent builds vmlet and runs `vmlet agent --runtime pod` on this machine against the
// cluster (its CRDs applied first), stopped with SIGTERM at the test's end.
func runAgent(t *testing.T, ctx context.Context, c *realcluster.Cluster) *agentProc {
	t.Helper()
	tmp := t.TempDir()
	// The launcher's user (107) must reach the agent's folders.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(tmp, "vmlet")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/vmlet")
	build.Dir = realcluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vmlet: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(realcluster.RepoRoot(), "config", "crd")); err != nil {
		t.Fatalf("kubectl apply -k config/crd: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd", "--all", "--timeout=2m"); err != nil {
		t.Fatalf("kubectl wait for the CRDs: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "agent", "--runtime", "pod", "--kubeconfig", c.Kubeconfig, "--node-name", c.NodeName,
		"--launcher-root", filepath.Join(tmp, "launchers"), "--volume-root", filepath.Join(tmp, "volumes"),
		"--image-cache", filepath.Join(tmp, "images"), "--state-dir", filepath.Join(tmp, "state"),
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", health,
		"--device-plugin-count", strconv.Itoa(agentCount))
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{health: health, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
			if a.err != nil {
				t.Errorf("agent exit: %v", a.err)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-a.done
			t.Errorf("agent did not stop within 1m of SIGTERM (killed: %v)", a.err)
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", poll.Tail(out.String(), 8000))
		}
		if left := socketIDs(t, pluginapi.DevicePluginPath); len(left) > 0 {
			t.Errorf("plugin sockets left after the agent stopped: %v", left)
		}
	})
	return a
}

// waitReady waits until GET http://<health>/path answers 200; it fails at once when the agent
// exited.
func (a *agentProc) waitReady(t *testing.T, path string) {
	t.Helper()
	t0 := time.Now()
	poll.Until(t, 2*time.Minute, "agent "+path, func() (bool, string) {
		select {
		case <-a.done:
			t.Fatalf("agent exited: %v", a.err)
		default:
		}
		resp, err := http.Get("http://" + a.health + path)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, b)
	})
	t.Logf("agent %s ok %s after it started waiting", path, time.Since(t0).Round(time.Millisecond))
}
