package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

const (
	agentNode  = "agent-e2e"
	guestImage = "vmlet.dev/testguest:agent-e2e"
)

// agentProc is one `vmlet agent` process.
type agentProc struct {
	cmd  *exec.Cmd
	out  *logbuf.Buffer
	done chan error
}

// agentSetup is what the agent processes of one test share: binaries, API server, folders.
type agentSetup struct {
	env                     *apienv.Env
	node                    string
	vmlet, launcher         string
	runRoot, stateDir, cg   string
	cpu                     *cpuweight.Hierarchy
	nodeNetns, podNetnsDir  string
	resolvConf, guestSource string
	// extraArgs are more `vmlet agent` flags for every start (e.g. --claim).
	extraArgs []string
}

func (s *agentSetup) start(t *testing.T) *agentProc {
	t.Helper()
	return s.startWith(t, nil)
}

// startWith is start with more environment variables for this agent process (e.g. fault
// points).
func (s *agentSetup) startWith(t *testing.T, env []string) *agentProc {
	t.Helper()
	cmd := exec.Command(s.vmlet, append([]string{"agent",
		"--kubeconfig", s.env.Kubeconfig, "--node-name", s.node, "--register-node",
		"--launcher", s.launcher, "--run-root", s.runRoot, "--state-dir", s.stateDir, "--cgroup-parent", s.cg,
		"--node-netns", s.nodeNetns, "--pod-netns-dir", s.podNetnsDir, "--resolv-conf", s.resolvConf,
		"--image", guestImage + "=" + s.guestSource,
		// Ports the kernel chooses: other packages' vmlet processes may hold the defaults.
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"}, s.extraArgs...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &agentProc{cmd: cmd, out: &logbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	return p
}

// kill9 kills the agent the hard way and waits until it is gone.
func (p *agentProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		t.Logf("agent ended: %v", err) // "signal: killed"
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not die of SIGKILL")
	}
}

// stop sends SIGTERM and expects a clean exit.
func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v\n%s", err, tailOf(p.out.String()))
		}
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		t.Error("agent did not stop on SIGTERM")
	}
}

func buildBinaries(t *testing.T, dir string) (vmlet, launcher string) {
	t.Helper()
	vmlet, launcher = filepath.Join(dir, "vmlet"), filepath.Join(dir, "vmlet-launcher")
	for bin, pkg := range map[string]string{vmlet: "github.com/vmlet/vmlet/cmd/vmlet", launcher: "github.com/vmlet/vmlet/cmd/vmlet-launcher"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return vmlet, launcher
}

// newSetup is an agent setup on an API server of its own, as node agentNode.
func newSetup(t *testing.T) *agentSetup {
	t.Helper()
	prereq.Root(t)
	prereq.QEMU(t)
	return newSetupOn(t, startEnv(t), agentNode, "")
}

// startEnv starts an API server with vmlet's CRDs for the test.
func startEnv(t *testing.T) *apienv.Env {
	t.Helper()
	env, err := apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// newSetupOn is the folders, cgroup and node namespace of one agent (node) on env; binDir
// holds built binaries to share ("": build them for this setup).
func newSetupOn(t *testing.T, env *apienv.Env, node, binDir string) *agentSetup {
	t.Helper()
	tmp, err := os.MkdirTemp("", "vmlet-agent-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil { // like /run: the launchers' user (107) passes
		t.Fatal(err)
	}
	s := &agentSetup{env: env, node: node, runRoot: filepath.Join(tmp, "run"), stateDir: filepath.Join(tmp, "state"),
		podNetnsDir: filepath.Join(tmp, "pods"), resolvConf: filepath.Join(tmp, "resolv.conf")}
	if binDir == "" {
		s.vmlet, s.launcher = buildBinaries(t, tmp)
	} else {
		s.vmlet, s.launcher = filepath.Join(binDir, "vmlet"), filepath.Join(binDir, "vmlet-launcher")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	s.cg = "vmlet-agent-e2e-" + suffix
	if root, err := devices.FindCgroup2Mount(); err == nil { // last, after the launchers' jails
		t.Cleanup(func() { _ = os.Remove(filepath.Join(root, s.cg)) })
	}
	s.cpu = cpuGroups(t, s.cg)
	// The node bridge lives in a namespace of the test's own: guests reach nothing else.
	nsName := "vmlet-agt-" + suffix
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsName).Run() })
	s.nodeNetns = "/run/netns/" + nsName
	if err := os.WriteFile(s.resolvConf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.guestSource = guestvmi.WriteLayout(t, tmp)
	return s
}

// TestAgentKill9: a separate `vmlet agent` process is killed with SIGKILL while its VM runs;
// the guest keeps running, a spec change made while no agent runs is applied by the restarted
// agent, which adopts the launcher (no second one), and deleting the VMI then leaves nothing.
func TestAgentKill9(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	c := s.env.Client
	a := s.start(t)
	defer func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("agent output:\n%s", tailOf(a.out.String()))
		}
	}()

	vmi := guestvmi.VMI("kill9", guestImage)
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	// Stand in for the scheduler (the cluster controller does this from the launcher pod).
	vmi.Status.NodeName = agentNode
	vmi.Status.Phase = vmletv1.Scheduled
	if err := c.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	running := waitFor(t, c, key, 3*time.Minute, "Ready", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	qemuPid := int(running.Status.Launcher.PID)
	runDir := filepath.Join(s.runRoot, uid)
	launcherPid := readPid(t, filepath.Join(runDir, "launcher.pid"))
	serial := filepath.Join(runDir, "logs", "serial.log")
	waitFile(t, serial, testguest.MarkerReady, 3*time.Minute)
	ip := running.Status.Interfaces
	t.Logf("running: launcher %d, qemu %d, interfaces %+v", launcherPid, qemuPid, ip)

	// Cluster mode: the Node's conditions are the kubelet's; the agent writes none.
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: agentNode}, node); err != nil {
		t.Fatal(err)
	}
	if len(node.Status.Conditions) != 0 {
		t.Errorf("vmlet agent wrote Node conditions %+v; they are the kubelet's", node.Status.Conditions)
	}

	a.kill9(t)
	if !poll.Alive(launcherPid) || !poll.Alive(qemuPid) {
		t.Fatalf("SIGKILL of the agent took the VM along: launcher alive %v, qemu alive %v", poll.Alive(launcherPid), poll.Alive(qemuPid))
	}
	// Changed while no agent runs: the next agent must act on it.
	patchPaused(t, c, key, true)

	a = s.start(t)
	waitFor(t, c, key, 2*time.Minute, "Paused after restart", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused)
	})
	patchPaused(t, c, key, false)
	after := waitFor(t, c, key, time.Minute, "Ready after unpause", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			!meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused)
	})
	if got := readPid(t, filepath.Join(runDir, "launcher.pid")); got != launcherPid || int(after.Status.Launcher.PID) != qemuPid {
		t.Fatalf("after restart: launcher %d (was %d), qemu %d (was %d): the VM was restarted", got, launcherPid, after.Status.Launcher.PID, qemuPid)
	}
	if n := launchersFor(t, runDir); n != 1 {
		t.Fatalf("%d launcher processes for %s, want 1", n, runDir)
	}
	if after.Status.Phase != vmletv1.Running || len(after.Status.Interfaces) == 0 || after.Status.Interfaces[0].IP == "" {
		t.Errorf("status after restart: phase %s, interfaces %+v", after.Status.Phase, after.Status.Interfaces)
	}

	if err := c.Delete(ctx, after); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "VMI deleted", func() (bool, string) {
		err := c.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	s.assertNothingLeft(t, uid, launcherPid, qemuPid)
}

// assertNothingLeft is the leak audit of a deleted VMI: its processes, run folder, volume
// folder, pod network namespace, cgroup jail (and with it the device program attached to it)
// and CPU cgroup are gone, and no mount names its folders.
func (s *agentSetup) assertNothingLeft(t *testing.T, uid string, pids ...int) (leaks int) {
	t.Helper()
	leak := func(format string, args ...any) {
		t.Helper()
		leaks++
		t.Errorf(format, args...)
	}
	for _, p := range pids {
		if poll.Alive(p) {
			leak("process %d left after delete", p)
		}
	}
	runDir, volDir := filepath.Join(s.runRoot, uid), filepath.Join(s.stateDir, "volumes", uid)
	if n := launchersFor(t, runDir); n != 0 {
		leak("%d launcher processes for %s left after delete", n, runDir)
	}
	for _, path := range []string{runDir, volDir, filepath.Join(s.podNetnsDir, "vmlet-"+uid)} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			leak("%s left after delete: %v", path, err)
		}
	}
	// The host end of the VMI's veth lives in the node namespace (one VMI per setup here).
	if out, err := exec.Command("ip", "-n", filepath.Base(s.nodeNetns), "-o", "link", "show", "type", "veth").CombinedOutput(); err != nil {
		leak("list veths of the node namespace: %v: %s", err, out)
	} else if strings.TrimSpace(string(out)) != "" {
		leak("veth left in the node namespace after delete: %s", out)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if strings.Contains(l, uid) {
				leak("mount left after delete: %s", l)
			}
		}
	}
	if cg, err := devices.FindCgroup2Mount(); err == nil {
		jail := filepath.Join(cg, s.cg, "vmlet-"+uid)
		if _, err := os.Stat(jail); !errors.Is(err, os.ErrNotExist) {
			leak("launcher cgroup %s left: %v", jail, err)
		}
		t.Cleanup(func() { _ = os.Remove(filepath.Join(cg, s.cg)) })
	}
	if s.cpu != nil {
		if vm := s.cpu.VM("vmlet-" + uid).Path; exists(vm) {
			leak("cpu cgroup %s left", vm)
		}
	}
	return leaks
}

func waitFor(t *testing.T, c client.Client, key client.ObjectKey, d time.Duration, what string, ok func(*vmletv1.VirtualMachineInstance) bool) *vmletv1.VirtualMachineInstance {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		v := &vmletv1.VirtualMachineInstance{}
		err := c.Get(context.Background(), key, v)
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not reached within %s: err %v, status %+v", key.Name, what, d, err, v.Status)
		}
		<-tick.C
	}
}

func patchPaused(t *testing.T, c client.Client, key client.ObjectKey, paused bool) {
	t.Helper()
	v := &vmletv1.VirtualMachineInstance{}
	if err := c.Get(context.Background(), key, v); err != nil {
		t.Fatal(err)
	}
	p := client.MergeFrom(v.DeepCopy())
	v.Spec.Paused = paused
	if err := c.Patch(context.Background(), v, p); err != nil {
		t.Fatal(err)
	}
}

func waitFile(t *testing.T, path, marker string, d time.Duration) {
	t.Helper()
	poll.Until(t, d, fmt.Sprintf("%q in %s", marker, path), func() (bool, string) {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), marker), tailOf(string(b))
	})
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return p
}

// launchersFor counts vmlet-launcher processes serving runDir.
func launchersFor(t *testing.T, runDir string) int { return len(launcherPids(t, runDir)) }

// launcherPids are the vmlet-launcher processes serving runDir.
func launcherPids(t *testing.T, runDir string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) != "vmlet-launcher" {
			continue
		}
		for i, a := range args {
			if a == "--run-dir" && i+1 < len(args) && args[i+1] == runDir && poll.Alive(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func tailOf(s string) string { return poll.Tail(s, 4000) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
