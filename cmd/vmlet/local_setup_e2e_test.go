package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

const (
	localNode  = "local-e2e"
	demoImage  = "vmlet.dev/testguest:latest" // config/samples/vmi-demo.yaml's
	runningMsg = "vmlet local: VMI default/demo is Running"
)

// localSetup is what the `vmlet local` processes of one test share: binaries, folders, the node
// network namespace and cgroup (all the test's own).
type localSetup struct {
	vmlet, launcher, assets string
	tmp, stateDir, runRoot  string
	cg, nodeNetns, podNetns string
	resolvConf, guestSource string
	cgroupMount             string
	cpu                     *cpuweight.Hierarchy // vmlet's CPU groups (--cpu-weights), nil without a cpu controller
	procs                   []*localProc
}

// localProc is one `vmlet local` process.
type localProc struct {
	cmd  *exec.Cmd
	out  *logbuf.Buffer
	done chan error
	err  error
	gone bool
}

func newLocalSetup(t *testing.T) *localSetup {
	t.Helper()
	prereq.Root(t)
	prereq.QEMU(t)
	assets, err := apienv.ControlPlaneAssets()
	if err != nil {
		t.Fatal(err)
	}
	// Short: the launchers' unix socket paths live beneath the run root.
	tmp, err := os.MkdirTemp("", "vmlet-local-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o711); err != nil { // like /run: an unprivileged launcher user passes
		t.Fatal(err)
	}
	s := &localSetup{assets: assets, tmp: tmp, stateDir: filepath.Join(tmp, "state"), runRoot: filepath.Join(tmp, "run"),
		podNetns: filepath.Join(tmp, "pods"), resolvConf: filepath.Join(tmp, "resolv.conf")}
	s.vmlet, s.launcher = buildBinaries(t, tmp)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	s.cg = "vmlet-local-e2e-" + suffix
	nsName := "vmlet-loc-" + suffix
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	s.nodeNetns = "/run/netns/" + nsName
	if err := os.WriteFile(s.resolvConf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.guestSource = guestvmi.WriteLayout(t, tmp)
	if s.cgroupMount, err = devices.FindCgroup2Mount(); err != nil {
		t.Fatal(err)
	}
	s.cpu = cpuGroups(t, s.cg)
	t.Cleanup(func() {
		s.cleanup(t)
		_ = exec.Command("ip", "netns", "del", nsName).Run()
		_ = os.Remove(filepath.Join(s.cgroupMount, s.cg))
		_ = os.RemoveAll(tmp)
	})
	return s
}

// cleanup kills what a failed test left: vmlet processes, launchers (detached on purpose),
// recorded control-plane processes.
func (s *localSetup) cleanup(t *testing.T) {
	for _, p := range s.procs {
		if !p.gone {
			_ = p.cmd.Process.Kill()
			p.err = <-p.done
			p.gone = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rt := range s.runtimes() {
		ids, _ := rt.List()
		for _, id := range ids {
			if err := rt.Remove(ctx, id); err != nil {
				t.Logf("remove leftover launcher %s: %v", id, err)
			}
		}
	}
	for _, r := range s.records(t) {
		if cmdlineHas(r.Pid, s.stateDir) {
			_ = syscall.Kill(r.Pid, syscall.SIGKILL)
		}
	}
	// With --nodes N each node has CPU groups of its own below the test's (a graceful stop
	// removes them; a killed vmlet leaves them, and the test's own groups cannot go before).
	for _, rt := range s.runtimes()[1:] {
		_ = os.Remove(rt.CgroupParent) // the node's device cgroup folder, once its launchers are gone
		if h := rt.CPU; h != nil {
			poll.Until(t, 30*time.Second, "node cpu groups "+h.Root+" removed", func() (bool, string) {
				err := h.Teardown()
				return err == nil, fmt.Sprint(err)
			})
		}
	}
	// Pod network namespaces are bind mounts (`ip netns del` does the same); with --nodes N
	// each node has its own folder of them.
	mounts, _ := filepath.Glob(filepath.Join(s.podNetns, "vmlet-*"))
	nodeMounts, _ := filepath.Glob(filepath.Join(s.podNetns, localNode+"*", "vmlet-*"))
	for _, m := range append(mounts, nodeMounts...) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
		_ = os.Remove(m)
	}
}

// runtimes are the launcher runtimes of the setup's nodes: the single node's (the run root
// itself) and, with --nodes N, one per node folder (<run root>/<node>, cgroup <cg>/<node>; see
// local.planNodes).
func (s *localSetup) runtimes() []*process.Runtime {
	out := []*process.Runtime{{RunRoot: s.runRoot, CgroupParent: filepath.Join(s.cgroupMount, s.cg), CPU: s.cpu}}
	dirs, _ := filepath.Glob(filepath.Join(s.runRoot, localNode+"*"))
	for _, d := range dirs {
		name := filepath.Base(d)
		h, err := cpuweight.Find(filepath.Join(s.cg, name))
		if err != nil {
			h = nil
		}
		out = append(out, &process.Runtime{RunRoot: d, CgroupParent: filepath.Join(s.cgroupMount, s.cg, name), CPU: h})
	}
	return out
}

func (s *localSetup) start(t *testing.T, extra ...string) *localProc {
	t.Helper()
	args := append(s.commonArgs(), "--demo", filepath.Join(apienv.RepoRoot(), "config", "samples", "vmi-demo.yaml"),
		"--node-subnet", "198.19.201.0/24")
	return s.run(t, append(args, extra...)...)
}

// commonArgs are the `vmlet local` arguments every start of the setup uses: its folders, node
// name and netns, control plane and guest image.
func (s *localSetup) commonArgs() []string {
	return []string{"local", "--state-dir", s.stateDir, "--run-root", s.runRoot, "--cgroup-parent", s.cg,
		"--assets", s.assets, "--crds", filepath.Join(apienv.RepoRoot(), "config", "crd", "bases"),
		"--node-name", localNode, "--node-netns", s.nodeNetns,
		"--pod-netns-dir", s.podNetns, "--resolv-conf", s.resolvConf,
		"--image", demoImage + "=" + s.guestSource,
		// Ports the kernel chooses: other packages' vmlet processes may hold the defaults.
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
	}
}

// run starts `vmlet ARGS...` (args include the "local" subcommand).
func (s *localSetup) run(t *testing.T, args ...string) *localProc {
	t.Helper()
	cmd := exec.Command(s.vmlet, args...)
	p := &localProc{cmd: cmd, out: &logbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start vmlet local: %v", err)
	}
	go func() { p.done <- cmd.Wait() }()
	s.procs = append(s.procs, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("vmlet local (pid %d) output:\n%s", cmd.Process.Pid, tailOf(p.out.String()))
			if b, err := os.ReadFile(filepath.Join(s.stateDir, "vmlet.log")); err == nil {
				t.Logf("vmlet.log:\n%s", tailOf(string(b)))
			}
		}
	})
	return p
}

// waitOutput waits until the process printed want (or fails if it exits first).
func (p *localProc) waitOutput(t *testing.T, want string, d time.Duration) {
	t.Helper()
	poll.Until(t, d, fmt.Sprintf("vmlet local printed %q", want), func() (bool, string) {
		if p.exited() {
			t.Fatalf("vmlet local exited (%v) before printing %q:\n%s", p.err, want, tailOf(p.out.String()))
		}
		return strings.Contains(p.out.String(), want), tailOf(p.out.String())
	})
}

func (p *localProc) exited() bool {
	if p.gone {
		return true
	}
	select {
	case p.err = <-p.done:
		p.gone = true
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns how it exited.
func (p *localProc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	if p.gone {
		return p.err
	}
	select {
	case p.err = <-p.done:
		p.gone = true
		return p.err
	case <-time.After(d):
		t.Fatalf("vmlet local did not exit within %s:\n%s", d, tailOf(p.out.String()))
		return nil
	}
}

// interrupt is Ctrl-C: SIGINT, and a clean exit.
func (p *localProc) interrupt(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("vmlet local exit after Ctrl-C: %v\n%s", err, tailOf(p.out.String()))
	}
	return time.Since(start)
}

// client talks to the API server of the running `vmlet local` (its kubeconfig is rewritten on
// every start).
func (s *localSetup) client(t *testing.T) client.WithWatch {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.stateDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, vmletv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	ctrllog.SetLogger(logr.Discard())
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// processRecord mirrors local's StateDir/controlplane.json entries.
type processRecord struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
}

func (s *localSetup) records(t *testing.T) []processRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.stateDir, "controlplane.json"))
	if err != nil {
		return nil
	}
	var rs []processRecord
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("controlplane.json: %v", err)
	}
	return rs
}

// cmdlineHas reports whether process pid's command line mentions s (e.g. our state folder).
func cmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), s)
}

// controlPlaneOf lists the running etcd and kube-apiserver processes serving our state folder.
func (s *localSetup) controlPlaneOf() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || !poll.Alive(pid) {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		if (base == "etcd" || base == "kube-apiserver") && cmdlineHas(pid, s.stateDir) {
			out = append(out, pid)
		}
	}
	return out
}

// vmState is what a test remembers of a running VMI to check that it was adopted (same
// processes) or that it left nothing.
type vmState struct {
	key                  client.ObjectKey
	uid                  string
	launcherPid, qemuPid int
}

func (s *localSetup) running(t *testing.T, c client.Client, name string) vmState {
	t.Helper()
	key := client.ObjectKey{Namespace: "default", Name: name}
	v := waitFor(t, c, key, 3*time.Minute, "Running with a QEMU pid", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Running && v.Status.Launcher != nil && v.Status.Launcher.PID > 0
	})
	uid := string(v.UID)
	return vmState{key: key, uid: uid, qemuPid: int(v.Status.Launcher.PID),
		launcherPid: readPid(t, filepath.Join(s.runRoot, uid, "launcher.pid"))}
}

// assertGone checks that nothing of the VM is left on the node: processes, run folder, volumes,
// pod netns, launcher cgroup, CPU groups.
func (s *localSetup) assertGone(t *testing.T, vm vmState) {
	t.Helper()
	for _, p := range []int{vm.launcherPid, vm.qemuPid} {
		if poll.Alive(p) {
			t.Errorf("%s: process %d left", vm.key.Name, p)
		}
	}
	for _, path := range []string{filepath.Join(s.runRoot, vm.uid), filepath.Join(s.stateDir, "volumes", vm.uid),
		filepath.Join(s.podNetns, "vmlet-"+vm.uid), filepath.Join(s.cgroupMount, s.cg, "vmlet-"+vm.uid), s.cpuGroup(vm.uid)} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s left: %v", vm.key.Name, path, err)
		}
	}
}

func (s *localSetup) assertControlPlaneGone(t *testing.T, d time.Duration) {
	t.Helper()
	poll.Until(t, d, "etcd and kube-apiserver of this state folder gone", func() (bool, string) {
		ps := s.controlPlaneOf()
		return len(ps) == 0, fmt.Sprint(ps)
	})
}

func nodeReady(t *testing.T, c client.Client) *corev1.NodeCondition {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: localNode}, n); err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func assertNodeReady(t *testing.T, c client.Client) {
	t.Helper()
	r := nodeReady(t, c)
	if r == nil || r.Status != corev1.ConditionTrue || r.Reason != "VmletReady" || r.LastHeartbeatTime.IsZero() {
		t.Errorf("node Ready condition = %+v, want True, VmletReady, with a heartbeat time", r)
	}
}

// assertAdopted checks that the restarted vmlet drives the same VM: it applies a pause (so its
// agent really adopted the launcher), the launcher and QEMU are the same processes, and there
// is exactly one launcher.
func (s *localSetup) assertAdopted(t *testing.T, c client.Client, vm vmState) {
	t.Helper()
	patchPaused(t, c, vm.key, true)
	waitFor(t, c, vm.key, 2*time.Minute, "Paused by the restarted agent", func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstancePaused)
	})
	patchPaused(t, c, vm.key, false)
	after := waitFor(t, c, vm.key, time.Minute, "Ready after unpause", func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstanceReady) && !isTrue(v, vmletv1.VirtualMachineInstancePaused)
	})
	runDir := filepath.Join(s.runRoot, vm.uid)
	if string(after.UID) != vm.uid || after.Status.Phase != vmletv1.Running {
		t.Errorf("after restart: uid %s phase %s, want %s Running", after.UID, after.Status.Phase, vm.uid)
	}
	if got := readPid(t, filepath.Join(runDir, "launcher.pid")); got != vm.launcherPid || int(after.Status.Launcher.PID) != vm.qemuPid || !poll.Alive(vm.qemuPid) {
		t.Errorf("after restart: launcher %d (was %d), QEMU %d (was %d): the VM was restarted", got, vm.launcherPid, after.Status.Launcher.PID, vm.qemuPid)
	}
	if n := launchersFor(t, runDir); n != 1 {
		t.Errorf("%d launcher processes for %s, want 1", n, runDir)
	}
	for _, ts := range after.Status.PhaseTransitionTimestamps {
		if ts.Phase == vmletv1.Failed || ts.Phase == vmletv1.Succeeded {
			t.Errorf("VMI went through %s across the restart", ts.Phase)
		}
	}
}

func isTrue(v *vmletv1.VirtualMachineInstance, cond string) bool {
	for _, c := range v.Status.Conditions {
		if c.Type == cond {
			return c.Status == "True"
		}
	}
	return false
}

func waitDeletedVMI(t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "VMI deleted", func() (bool, string) {
		err := c.Get(context.Background(), key, &vmletv1.VirtualMachineInstance{})
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprint(err)
	})
}

func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// cpuGroup is the VM's CPU group folder (its jail on cgroup v2 or without CPU weights).
func (s *localSetup) cpuGroup(uid string) string {
	if s.cpu == nil {
		return filepath.Join(s.cgroupMount, s.cg, "vmlet-"+uid)
	}
	return s.cpu.VM("vmlet-" + uid).Path
}

// cpuGroups is the CPU hierarchy of a vmlet run with --cgroup-parent cg (nil when the host has
// no cpu controller). Its system group and folder are node-level, kept by vmlet; a cleanup
// registered now (so it runs after those registered later, which stop the processes) removes
// them.
func cpuGroups(t *testing.T, cg string) *cpuweight.Hierarchy {
	t.Helper()
	h, err := cpuweight.Find(cg)
	if err != nil {
		return nil
	}
	t.Cleanup(func() {
		// Processes killed by the cleanup before this one leave their groups a moment later
		// (once reaped): until then rmdir says busy. A group still busy after that is a leak.
		poll.Until(t, 30*time.Second, "the test's cpu groups removed", func() (bool, string) {
			err := h.Teardown()
			return err == nil, fmt.Sprint(err)
		})
	})
	return h
}

// assertCPUGroups checks where `vmlet local` put things with CPU weights (cgroup v1): vmlet
// and its control plane in the system group, the launcher in launchers, QEMU in the VM's group
// (its main thread; the vCPUs are below, once the agent placed them).
func (s *localSetup) assertCPUGroups(t *testing.T, p *localProc, vm vmState) {
	t.Helper()
	if s.cpu == nil || s.cpu.Version != cpuweight.V1 {
		return // v2: the VM's group is its jail (covered in controllers)
	}
	in := func(dir string, id int) bool {
		b, _ := os.ReadFile(filepath.Join(dir, "tasks"))
		return slices.Contains(strings.Fields(string(b)), strconv.Itoa(id))
	}
	for _, pid := range append([]int{p.cmd.Process.Pid}, s.controlPlaneOf()...) {
		if !in(s.cpu.SystemPath(), pid) {
			t.Errorf("pid %d (vmlet or its control plane) not in %s", pid, s.cpu.SystemPath())
		}
	}
	if !in(s.cpu.LauncherPath(), vm.launcherPid) {
		t.Errorf("launcher %d not in %s", vm.launcherPid, s.cpu.LauncherPath())
	}
	g := s.cpu.VM("vmlet-" + vm.uid)
	poll.Until(t, 30*time.Second, "QEMU in its VM group, vCPUs placed", func() (bool, string) {
		v, _ := g.VCPUThreads()
		return in(g.Path, vm.qemuPid) && len(v) > 0, fmt.Sprintf("vcpus %v", v)
	})
}

// assertNodeDirsGone checks that a graceful shutdown left nothing of the nodes either: run
// roots, launcher cgroup parents, CPU groups (the node's, system, launchers). No nodes: the
// single node, in the configured folders themselves; with nodes, their folders and the
// configured ones holding them.
func (s *localSetup) assertNodeDirsGone(t *testing.T, nodes ...string) {
	t.Helper()
	var cpuParents []string
	if len(nodes) == 0 {
		cpuParents = []string{s.cg}
	} else {
		for _, n := range nodes {
			cpuParents = append(cpuParents, filepath.Join(s.cg, n))
		}
	}
	paths := []string{s.runRoot, filepath.Join(s.cgroupMount, s.cg)}
	for _, n := range nodes {
		paths = append(paths, filepath.Join(s.runRoot, n), filepath.Join(s.cgroupMount, s.cg, n))
	}
	for _, p := range cpuParents {
		if h, err := cpuweight.Find(p); err == nil {
			paths = append(paths, h.SystemPath(), h.LauncherPath(), h.Root)
		}
	}
	if s.cpu != nil {
		paths = append(paths, s.cpu.Root)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			ents, _ := os.ReadDir(p)
			var names []string
			for _, e := range ents {
				if e.IsDir() {
					names = append(names, e.Name())
				}
			}
			t.Errorf("after the shutdown %s is left (folders in it: %v): %v", p, names, err)
		}
	}
}
