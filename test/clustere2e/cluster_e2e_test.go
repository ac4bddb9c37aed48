package clustere2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/kubeletsim"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/procstatus"
	"github.com/vmlet/vmlet/test/testguest"
)

const (
	nodeName   = "cluster-node"
	guestImage = "vmlet.dev/testguest:cluster"
)

// One API server and one build of the binaries per package; each test runs its own controller,
// agent and kubeletsim against it.
var (
	env                     *apienv.Env
	vmletBin, launch, vmctl string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if flag.Parse(); os.Geteuid() != 0 || testing.Short() {
		return m.Run() // the tests' prereq guards say why they cannot run (and fail under CI)
	}
	var err error
	env, err = apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}, Aggregation: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start api server:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	bin, err := os.MkdirTemp("", "vmlet-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	if err := os.Chmod(bin, 0o755); err != nil { // the launcher pods' user (107) execs from it
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	vmletBin, launch, vmctl = filepath.Join(bin, "vmlet"), filepath.Join(bin, "vmlet-launcher"), filepath.Join(bin, "vmctl")
	for b, pkg := range map[string]string{vmletBin: "github.com/vmlet/vmlet/cmd/vmlet", launch: "github.com/vmlet/vmlet/cmd/vmlet-launcher",
		vmctl: "github.com/vmlet/vmlet/cmd/vmctl"} {
		if out, err := exec.Command("go", "build", "-o", b, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// cluster is one test's cluster: controller and agent processes and kubeletsim.
type cluster struct {
	env *apienv.Env
	// controllerArgs start the controller again; controller is the running one.
	controllerArgs []string
	controller     *proc
	// agentArgs start the node agent again (startAgent); agent is the running one.
	agentArgs []string
	agent     *proc
	// agentHealth and controllerHealth are the processes' health endpoints (host:port).
	agentHealth, controllerHealth        string
	tmp                                  string
	launcherRoot, volumeRoot, imageCache string
	podCgroups                           string
	podNetns                             string
	// cniNetns is the namespace (ip netns name) of the first node's pod bridge.
	cniNetns string
	kubelet  *kubeletsim.Kubelet
	// others are the nodes after the first (clusterOptions.nodes), whose fields above are.
	others []*simNode
	procs  []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *logbuf.Buffer
	done chan error
	// diesOnTerm: the process ends by SIGTERM itself (kube-controller-manager), not with 0.
	diesOnTerm bool
}

// clusterOptions change what startCluster runs.
type clusterOptions struct {
	// heartbeat is the agent's --heartbeat-interval (0: its default).
	heartbeat time.Duration
	// subresources is the controller's --subresources-bind-address ("": off); with it the
	// agent serves VMI streams on a loopback port.
	subresources string
	// nodes is how many nodes the cluster has (0: 1). With 2 or more each agent relays live
	// migrations on 127.0.0.1 (--migration-address), and the nodes after the first are
	// simNodes: an agent and a kubeletsim with hostPath folders of their own.
	nodes int
	// evictionWebhook serves the controller's eviction webhook on a loopback port, registered
	// at its URL (kubectl drain migrates VMIs).
	evictionWebhook bool
}

func startCluster(t *testing.T) *cluster { return startClusterWith(t, clusterOptions{}) }

func startClusterWith(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	prereq.Root(t)
	prereq.QEMU(t)
	tmp, err := os.MkdirTemp("", "vc-") // short: node 2's sockets are under <its root><tmp>/l/<uid>
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(t, tmp)
		_ = os.RemoveAll(tmp)
	})
	if err := os.Chmod(tmp, 0o711); err != nil { // like /var/run and /var/lib on a node
		t.Fatal(err)
	}
	c := &cluster{env: env, tmp: tmp, launcherRoot: filepath.Join(tmp, "l"), volumeRoot: filepath.Join(tmp, "volumes"),
		imageCache: filepath.Join(tmp, "images"), podNetns: filepath.Join(tmp, "pods")}
	vmlet, launcher := vmletBin, launch
	suffix := randomSuffix()
	cg, err := devices.FindCgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	c.podCgroups = filepath.Join(cg, "vmlet-cluster-"+suffix)
	if err := os.Mkdir(c.podCgroups, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(c.podCgroups) })
	// The CNI's node bridge lives in a namespace of the test's own: guests reach nothing else.
	nsName := "vmlet-cl-" + suffix
	c.cniNetns = nsName
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsName).Run() })
	cni, err := network.NewNode(network.NodeConfig{NetnsPath: "/run/netns/" + nsName, NetnsDir: c.podNetns})
	if err != nil {
		t.Fatal(err)
	}
	guest := guestvmi.WriteLayout(t, tmp)

	// Ports of their own: other packages' vmlet processes may hold the defaults.
	c.controllerHealth, c.agentHealth = freeAddr(t), freeAddr(t)
	ctlArgs := []string{vmlet, "controller", "--kubeconfig", env.Kubeconfig, "--launcher-root", c.launcherRoot,
		"--volume-root", c.volumeRoot, "--image-cache", c.imageCache, "--allow-emulation",
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", c.controllerHealth}
	if o.subresources != "" {
		ctlArgs = append(ctlArgs, "--subresources-bind-address", o.subresources)
	}
	if o.evictionWebhook {
		wh := freeAddr(t)
		ctlArgs = append(ctlArgs, "--eviction-webhook-bind-address", wh, "--eviction-webhook-url", "https://"+wh+evacuation.WebhookPath)
	}
	c.controllerArgs = ctlArgs
	c.controller = c.run(t, "controller", ctlArgs...)
	c.agentArgs = []string{vmlet, "agent", "--runtime", "pod", "--kubeconfig", env.Kubeconfig, "--node-name", nodeName,
		"--register-node", "--launcher-root", c.launcherRoot, "--volume-root", c.volumeRoot, "--image-cache", c.imageCache,
		"--state-dir", filepath.Join(tmp, "state"), "--image", guestImage + "=" + guest,
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", c.agentHealth,
		// No kubelet for its device plugin here: kubeletsim advertises the same resources on the Node.
		"--device-plugins=false"}
	if o.heartbeat > 0 {
		c.agentArgs = append(c.agentArgs, "--heartbeat-interval", o.heartbeat.String())
	}
	if o.subresources != "" {
		c.agentArgs = append(c.agentArgs, "--streams-bind-address", "127.0.0.1:0")
	}
	if o.nodes > 1 {
		c.agentArgs = append(c.agentArgs, "--migration-address", "127.0.0.1")
	}
	c.startAgent(t)
	names := []string{nodeName}
	for i := 2; i <= o.nodes; i++ {
		n := c.addNode(t, i, guest, suffix)
		names = append(names, n.name)
	}

	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.kubelet = &kubeletsim.Kubelet{Client: mgr.GetClient(), NodeName: nodeName, CgroupParent: c.podCgroups, Network: cni,
		LogDir: tmp, Binaries: map[string]string{launcherpod.Binary: launcher}}
	if err := c.kubelet.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.others {
		n.kubelet.Client = mgr.GetClient()
		if err := n.kubelet.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	if err := (&kubeletsim.Scheduler{Client: mgr.GetClient(), Nodes: names}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		for i := len(c.procs) - 1; i >= 0; i-- {
			c.procs[i].stop(t)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kubeletsim manager: %v", err)
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := c.kubelet.Stop(sctx); err != nil {
			t.Errorf("stop kubelet: %v", err)
		}
		for _, n := range c.others {
			if err := n.kubelet.Stop(sctx); err != nil {
				t.Errorf("stop kubelet of %s: %v", n.name, err)
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(c.tmp, "*.log")) // the launcher pods' (kubeletsim)
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("launcher pod %s output:\n%s", strings.TrimSuffix(filepath.Base(l), ".log"), poll.Tail(string(b), 3000))
			}
		}
	})
	// Every node takes launcher pods once its agent labelled it (its heartbeat): until then the
	// scheduler passes it over, and a test's first VMI would not go to the first node.
	poll.Until(t, 2*time.Minute, "every node labelled schedulable by its agent", func() (bool, string) {
		for _, name := range names {
			n := &corev1.Node{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil || n.Labels[controllers.LabelSchedulable] != "true" {
				return false, fmt.Sprintf("node %s: labels %v, %v", name, n.Labels, err)
			}
		}
		return true, ""
	})
	return c
}

// startAgent starts the node agent (again).
func (c *cluster) startAgent(t *testing.T) {
	t.Helper()
	c.agent = c.run(t, "agent", c.agentArgs...)
}

// killAgent kills the node agent the hard way (SIGKILL) and waits until it is gone.
func (c *cluster) killAgent(t *testing.T) {
	t.Helper()
	p := c.agent
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		t.Logf("agent ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not die of SIGKILL")
	}
	c.forget(p)
	c.agent = nil
}

// stopAgent stops the node agent (SIGTERM, a clean exit expected).
func (c *cluster) stopAgent(t *testing.T) {
	t.Helper()
	c.agent.stop(t)
	c.forget(c.agent)
	c.agent = nil
}

func (c *cluster) forget(p *proc) {
	for i, q := range c.procs {
		if q == p {
			c.procs = append(c.procs[:i], c.procs[i+1:]...)
			return
		}
	}
}

func (c *cluster) run(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), out: &logbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	c.procs = append(c.procs, p)
	return p
}

func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if p.diesOnTerm && errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
			err = nil
		}
		if err != nil {
			t.Errorf("%s exit: %v", p.name, err)
		}
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		t.Errorf("%s did not stop on SIGTERM", p.name)
	}
	if t.Failed() {
		t.Logf("%s output:\n%s", p.name, poll.Tail(p.out.String(), 6000))
	}
}

// TestClusterMode: kubectl create of a VMI in cluster mode → a launcher pod with the contract,
// bound by the scheduler and run by the kubelet; the agent finds its launcher, filters its
// devices, wires its network in the pod's namespace and the guest boots and gets its address;
// delete → graceful shutdown, the pod goes, and nothing is left on the node.
func TestClusterMode(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cl := c.env.Client
	vmi := guestvmi.VMI("cluster", guestImage)
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready with an address", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != ""
	})
	if ready.Status.NodeName != nodeName || ready.Status.Phase != vmletv1.Running {
		t.Fatalf("ready VMI: node %q phase %s", ready.Status.NodeName, ready.Status.Phase)
	}
	pod := c.launcherPod(t, uid)
	if ready.Status.Launcher == nil || ready.Status.Launcher.Pod != pod.Name {
		t.Errorf("status.launcher %+v, want pod %s", ready.Status.Launcher, pod.Name)
	}
	qemuPid := int(ready.Status.Launcher.PID)
	t.Logf("running in pod %s: qemu %d, address %s", pod.Name, qemuPid, ready.Status.Interfaces[0].IP)
	// The pod's securityContext (runAsUser/runAsGroup 107, capabilities dropped, no privilege
	// escalation) holds for the launcher and QEMU, which runs sandboxed.
	qs, err := procstatus.Read(qemuPid)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := procstatus.Read(qs.PPid)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]procstatus.Status{"launcher": ls, "qemu": qs} {
		for _, bad := range s.Unprivileged(launcherpod.DefaultRunAsUser, launcherpod.DefaultRunAsGroup) {
			t.Errorf("%s: %s", name, bad)
		}
	}
	if qs.Seccomp != 2 {
		t.Errorf("qemu Seccomp=%d, want 2 (-sandbox on)", qs.Seccomp)
	}
	// QEMU runs in the pod's cgroup, and that cgroup carries vmlet's device program.
	podCg := filepath.Join(c.podCgroups, "pod-"+string(pod.UID))
	if procs, err := os.ReadFile(filepath.Join(podCg, "cgroup.procs")); err != nil || !strings.Contains(string(procs), fmt.Sprint(qemuPid)) {
		t.Errorf("qemu %d not in the pod cgroup %s: %q, %v", qemuPid, podCg, procs, err)
	}
	f, err := devices.Recover(podCg)
	if err != nil {
		t.Errorf("no vmlet device program on the pod cgroup: %v", err)
	} else {
		_ = f.Close()
	}
	serial := filepath.Join(launcherpod.HostRunDir(c.launcherRoot, vmi.UID), "logs", "serial.log")
	poll.Until(t, 2*time.Minute, "guest boot marker in "+serial, func() (bool, string) {
		b, _ := os.ReadFile(serial)
		return strings.Contains(string(b), testguest.MarkerReady), poll.Tail(string(b), 2000)
	})

	if err := cl.Delete(ctx, ready); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "VMI and pod gone", func() (bool, string) {
		err := cl.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		perr := cl.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(perr), fmt.Sprintf("vmi: %v, pod: %v", err, perr)
	})
	if poll.Alive(qemuPid) {
		t.Errorf("qemu %d alive after delete", qemuPid)
	}
	for _, p := range []string{launcherpod.HostRunDir(c.launcherRoot, vmi.UID), launcherpod.HostVolumeDir(c.volumeRoot, vmi.UID),
		podCg, filepath.Join(c.podNetns, "vmlet-"+string(pod.UID))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after delete: %v", p, err)
		}
	}
}

// TestClusterQEMUKilled: QEMU dies → the node agent fails the VMI with the reason only it knows
// (QEMUDied; the controller leaves an ended pod to the agent for a grace period), the pod is
// deleted, and deleting the VMI leaves the node clean.
func TestClusterQEMUKilled(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cl := c.env.Client
	vmi := guestvmi.VMI("killed", guestImage)
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	pod := c.launcherPod(t, string(vmi.UID))
	if err := syscall.Kill(int(ready.Status.Launcher.PID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := c.waitVMI(t, key, time.Minute, "Failed", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Failed
	})
	if failed.Status.Reason != "QEMUDied" {
		t.Errorf("failed with reason %q, want QEMUDied", failed.Status.Reason)
	}
	poll.Until(t, time.Minute, "launcher pod deleted", func() (bool, string) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	poll.Until(t, time.Minute, "run folder removed", func() (bool, string) {
		_, err := os.Stat(launcherpod.HostRunDir(c.launcherRoot, vmi.UID))
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
	})
	if err := cl.Delete(ctx, failed); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "failed VMI deleted", func() (bool, string) {
		err := cl.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for _, p := range []string{launcherpod.HostVolumeDir(c.volumeRoot, vmi.UID), filepath.Join(c.podCgroups, "pod-"+string(pod.UID)),
		filepath.Join(c.podNetns, "vmlet-"+string(pod.UID))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

func (c *cluster) launcherPod(t *testing.T, uid string) *corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := c.env.Client.List(context.Background(), &l, client.MatchingLabels{launcherpod.LabelVMIUID: uid}); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d launcher pods for %s, want 1", len(l.Items), uid)
	}
	return &l.Items[0]
}

func (c *cluster) waitVMI(t *testing.T, key client.ObjectKey, d time.Duration, what string, ok func(*vmletv1.VirtualMachineInstance) bool) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	poll.Until(t, d, key.Name+" "+what, func() (bool, string) {
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.env.Client.Get(context.Background(), key, v); err != nil {
			return false, err.Error()
		}
		got = v
		return ok(v), fmt.Sprintf("phase %s reason %q conditions %+v", v.Status.Phase, v.Status.Reason, v.Status.Conditions)
	})
	return got
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ptrTo[T any](v T) *T { return &v }
