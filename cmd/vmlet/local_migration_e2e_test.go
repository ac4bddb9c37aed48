package main_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestLocalMigration: with `vmlet local --nodes 2`, config/samples/vmi-migratable.yaml applied
// with kubectl runs, and a client VMI pinned to the other node (nodeSelector
// kubernetes.io/hostname) reaches its guest's service on the declared port 80 from its pod, and
// from its guest on the nodes' shared network (vmlet-shared) at the address the VMI keeps.
// config/samples/vmim.yaml moves the VMI to the client's node, a second migration moves it back;
// each time the VMI reports the target node and its pod address there (on that node's pod
// subnet), the client reaches the service at that address, the guest's counter kept counting
// (same process), and the node it left has nothing of it. Between the two, vmlet is killed
// (SIGKILL) and started again: it adopts the migrated VM where it now runs. Ctrl-C leaves nothing.
func TestLocalMigration(t *testing.T) {
	s := newLocalSetup(t)
	st := s.startTwoNodes(t, "e2m")
	p, fabric, nodes, plan, uplinkBefore := st.p, st.fabric, st.nodes, st.plan, st.uplinkBefore
	subnetOf := func(node string) netip.Prefix { return plan[slices.Index(nodes, node)].PodSubnet }
	c := s.client(t)
	ctx := context.Background()
	kc := func(args ...string) string { t.Helper(); return st.kc(t, s, args...) }
	sample := func(name string) string { return filepath.Join(apienv.RepoRoot(), "config", "samples", name) }

	kc("create", "-f", sample("vmi-migratable.yaml"))
	vm := s.runningOn(t, c, "migratable")
	other := nodes[0]
	if vm.node == other {
		other = nodes[1]
	}
	cv := masqueradeVMI("client")
	cv.Spec.NodeSelector = map[string]string{corev1.LabelHostname: other}
	// On the shared network too, as the sample: guest to guest across the nodes.
	cv.Spec.Domain.Devices.Interfaces = append(cv.Spec.Domain.Devices.Interfaces, vmletv1.Interface{Name: "shared",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}})
	cv.Spec.Networks = append(cv.Spec.Networks, vmletv1.Network{Name: "shared",
		NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: controllers.SharedNetwork}}})
	if err := c.Create(ctx, cv); err != nil {
		t.Fatal(err)
	}
	cl := s.runningOn(t, c, "client")
	if cl.node != other {
		t.Fatalf("client on %s, want %s (its nodeSelector)", cl.node, other)
	}
	t.Logf("migratable on %s (pod %s), client on %s (pod %s)", vm.node, vm.podAddr, cl.node, cl.podAddr)

	assertTop(t, s, map[string]string{"migratable": vm.node, "client": cl.node})

	waitFor(t, c, vm.key, 3*time.Minute, "guest agent connected", func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	sock := func(vm nodeVM) string { return filepath.Join(s.runRoot, vm.node, vm.uid, process.ReadySocket) }
	reply := "hello-" + vm.uid[:8]
	pid := strings.TrimSpace(guestSh(t, sock(vm), "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!"))
	guestSh(t, sock(vm), "ip link set lo up; nc -ll -p 80 -e echo "+reply+" </dev/null >/dev/null 2>&1 &")
	waitServes(t, cl, vm.podAddr, reply)
	shared := sharedAddr(t, c, vm.key)
	waitGuestAgent(t, sock(cl))
	waitGuestReaches(t, sock(cl), shared, reply)

	for i, mig := range []string{"migratable-migration", "migratable-back"} {
		from, to := vm, cl.node
		if i == 1 {
			to = nodes[slices.Index(nodes, vm.node)^1]
		}
		if i == 1 {
			// vmlet itself crashes right after a migration (kill -9: no shutdown of anything);
			// the next start adopts the migrated VM on its new node and can migrate it again.
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := p.wait(t, time.Minute); err == nil {
				t.Fatal("vmlet local killed with SIGKILL exited 0")
			}
			if !poll.Alive(vm.launcherPid) || !poll.Alive(vm.qemuPid) {
				t.Fatalf("after kill -9 of vmlet: launcher alive %v, QEMU alive %v", poll.Alive(vm.launcherPid), poll.Alive(vm.qemuPid))
			}
			p = s.run(t, append(s.commonArgs(), "--demo", "", "--nodes", "2", "--fabric-name", fabric.Name)...)
			p.waitOutput(t, "nodes "+strings.Join(nodes, ", ")+" registered", 3*time.Minute)
			c = s.client(t)
			again := s.runningOn(t, c, "migratable")
			if again.uid != vm.uid || again.node != vm.node || again.qemuPid != vm.qemuPid || again.launcherPid != vm.launcherPid {
				t.Fatalf("after kill -9 and restart: %+v, want the migrated VM adopted: %+v", again, vm)
			}
			waitServes(t, cl, vm.podAddr, reply)
		}
		aw := watchAddresses(t, c, vm.key)
		before := guestCount(t, sock(from))
		if i == 0 {
			kc("create", "-f", sample("vmim.yaml"))
		} else {
			m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: mig},
				Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: "migratable"}}
			if err := c.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		waitMigration(t, c, client.ObjectKey{Namespace: "default", Name: mig})
		t.Logf("%s: Succeeded after %s", mig, time.Since(start).Round(time.Millisecond))
		v := waitFor(t, c, vm.key, time.Minute, "on "+to+" with its pod address there", func(v *vmletv1.VirtualMachineInstance) bool {
			if v.Status.NodeName != to || len(v.Status.Interfaces) == 0 {
				return false
			}
			a, err := netip.ParseAddr(v.Status.Interfaces[0].IP)
			return err == nil && subnetOf(to).Contains(a)
		})
		// Every version of the VMI that names the target names its QEMU and its addresses there:
		// the take-over writes them with status.nodeName (a client reading the VMI right after
		// the migration must not find the source's pod address or QEMU), and the shared
		// interface with them.
		targetQEMU := launcherQEMUPid(t, filepath.Join(s.runRoot, to, from.uid, process.ReadySocket))
		for _, sv := range aw.until(t, v.ResourceVersion) {
			if sv.node != to {
				continue
			}
			if a, err := netip.ParseAddr(sv.ips["default"]); err != nil || !subnetOf(to).Contains(a) {
				t.Errorf("%s: version %s names node %s with pod address %q (not of its pod subnet %s): interfaces %v", mig, sv.rv, to, sv.ips["default"], subnetOf(to), sv.ips)
			}
			if sv.pid != targetQEMU {
				t.Errorf("%s: version %s names node %s with QEMU pid %d, the target's is %d", mig, sv.rv, to, sv.pid, targetQEMU)
			}
			if sv.ips["shared"] != shared.String() {
				t.Errorf("%s: version %s names node %s with shared address %q, want %s", mig, sv.rv, to, sv.ips["shared"], shared)
			}
		}
		vm = s.runningOn(t, c, "migratable")
		if vm.uid != from.uid || vm.podAddr == from.podAddr {
			t.Fatalf("%s: uid %s, pod address %s (was %s, %s)", mig, vm.uid, vm.podAddr, from.uid, from.podAddr)
		}
		t.Logf("%s: on %s, pod address %s (interfaces %+v)", mig, vm.node, vm.podAddr, v.Status.Interfaces)
		waitServes(t, cl, vm.podAddr, reply)
		// On the shared network the guest kept its address: the client's guest reaches it
		// there, now on the same node.
		if got := sharedAddr(t, c, vm.key); got != shared {
			t.Errorf("%s: shared interface's address %s, was %s", mig, got, shared)
		}
		waitGuestReaches(t, sock(cl), shared, reply)
		waitGuestAgent(t, sock(vm))
		if got := strings.TrimSpace(guestSh(t, sock(vm), "[ -d /proc/"+pid+" ] && echo "+pid+" || true")); got != pid {
			t.Fatalf("%s: counter process %s gone on %s (the guest's memory did not survive): %q", mig, pid, to, got)
		}
		poll.Until(t, 30*time.Second, "the counter counts on "+to, func() (bool, string) {
			n := guestCount(t, sock(vm))
			return n > before, fmt.Sprintf("count %d, before the migration %d", n, before)
		})
		s.waitNodeVMGone(t, from, 2*time.Minute)
	}

	p.interrupt(t)
	s.assertControlPlaneGone(t, 10*time.Second)
	for _, v := range []nodeVM{vm, cl} {
		s.assertNodeVMGone(t, v)
	}
	s.assertFabricGone(t, fabric, plan, uplinkBefore)
}

// sharedAddr waits for the address of the VMI's "shared" interface in status.interfaces, one of
// the shared segment's.
func sharedAddr(t *testing.T, c client.Client, key client.ObjectKey) netip.Addr {
	t.Helper()
	var addr netip.Addr
	waitFor(t, c, key, 2*time.Minute, "an address of the shared network", func(v *vmletv1.VirtualMachineInstance) bool {
		for _, i := range v.Status.Interfaces {
			if a, err := netip.ParseAddr(i.IP); i.Name == "shared" && err == nil && network.DefaultSegmentSubnet.Contains(a) {
				addr = a
				return true
			}
		}
		return false
	})
	return addr
}

// waitGuestReaches waits until the guest of the launcher at sock reads want from addr:80.
func waitGuestReaches(t *testing.T, sock string, addr netip.Addr, want string) {
	t.Helper()
	poll.Until(t, time.Minute, "guest to "+addr.String()+":80", func() (bool, string) {
		out := guestSh(t, sock, "nc -w 2 "+addr.String()+" 80 </dev/null 2>&1 || true")
		return strings.Contains(out, want), out
	})
}

// guestSh runs cmd with the guest's /bin/sh through the guest agent of the launcher at sock.
func guestSh(t *testing.T, sock, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 20*time.Second)
	if err != nil {
		t.Fatalf("guest exec %q: %v", cmd, err)
	}
	if r.GetExitCode() != 0 {
		t.Fatalf("guest exec %q: exit %d: %s", cmd, r.GetExitCode(), r.GetStderr())
	}
	return string(r.GetStdout())
}

func guestCount(t *testing.T, sock string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(guestSh(t, sock, "cat /tmp/count")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// launcherDomain is the domain the launcher at sock reports (one dial, one GetDomain).
func launcherDomain(sock string, d time.Duration) (*pb.Domain, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := launcher.Dial(ctx, sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.GetDomain(ctx)
}

// launcherQEMUPid is the pid of the QEMU the launcher at sock runs, as it reports it.
func launcherQEMUPid(t *testing.T, sock string) int64 {
	t.Helper()
	d, err := launcherDomain(sock, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return int64(d.GetPid())
}

// waitGuestAgent waits until the launcher at sock talks to the guest agent.
func waitGuestAgent(t *testing.T, sock string) {
	t.Helper()
	poll.Until(t, time.Minute, "guest agent connected at "+sock, func() (bool, string) {
		d, err := launcherDomain(sock, 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		return d.GetAgentConnected(), d.GetState().String()
	})
}

// waitServes waits until a connection from the client VM's pod netns to addr:80 reads want
// (the guest's nc behind the forwarded port).
func waitServes(t *testing.T, from nodeVM, addr netip.Addr, want string) {
	t.Helper()
	ap := netip.AddrPortFrom(addr, 80).String()
	poll.Until(t, time.Minute, from.key.Name+"'s pod reads "+want+" from "+ap, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := network.DialTCP(ctx, from.podNetns, ap)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		got, err := io.ReadAll(conn)
		return strings.TrimSpace(string(got)) == want, fmt.Sprintf("%q, %v", got, err)
	})
}

// waitMigration waits until the migration key succeeded (and fails the test if it failed).
func waitMigration(t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	poll.Until(t, 5*time.Minute, key.Name+" Succeeded", func() (bool, string) {
		m := &vmletv1.VirtualMachineInstanceMigration{}
		if err := c.Get(context.Background(), key, m); err != nil {
			return false, err.Error()
		}
		if m.Status.Phase == vmletv1.MigrationFailed {
			t.Fatalf("%s failed: state %+v, conditions %+v", key.Name, m.Status.MigrationState, m.Status.Conditions)
		}
		return m.Status.Phase == vmletv1.MigrationSucceeded, string(m.Status.Phase)
	})
}

// waitNodeVMGone waits until the node vm ran on has nothing of it (assertNodeVMGone).
func (s *localSetup) waitNodeVMGone(t *testing.T, vm nodeVM, d time.Duration) {
	t.Helper()
	poll.Until(t, d, vm.key.Name+" left "+vm.node, func() (bool, string) {
		var left []string
		for _, p := range []int{vm.launcherPid, vm.qemuPid} {
			if poll.Alive(p) {
				left = append(left, "pid "+strconv.Itoa(p))
			}
		}
		for _, path := range []string{filepath.Join(s.runRoot, vm.node, vm.uid), filepath.Join(s.stateDir, "nodes", vm.node, "volumes", vm.uid), vm.podNetns} {
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				left = append(left, path)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	s.assertNodeVMGone(t, vm)
}

// assertTop runs `vmctl top -A -o json` against the stack (the nodes found through the API,
// both served on the process's one metrics endpoint): each VMI of want is listed once, on its
// node, with its memory.
func assertTop(t *testing.T, s *localSetup, want map[string]string) {
	t.Helper()
	out, err := exec.Command(buildVmctl(t, s), "top", "-A", "-o", "json", "--interval", "500ms", "--kubeconfig", filepath.Join(s.stateDir, "kubeconfig")).Output()
	if err != nil {
		t.Fatalf("vmctl top: %v", err)
	}
	var top struct {
		Items []struct {
			Namespace, Name, Node string
			CPUCores              *float64 `json:"cpuCores"`
			MemoryResidentBytes   *int64   `json:"memoryResidentBytes"`
		}
		Warnings []string
	}
	if err := json.Unmarshal(out, &top); err != nil {
		t.Fatalf("vmctl top -o json: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, it := range top.Items {
		if _, dup := got[it.Name]; dup || it.CPUCores == nil || it.MemoryResidentBytes == nil || *it.MemoryResidentBytes == 0 {
			t.Errorf("vmctl top: %s listed twice or without figures:\n%s", it.Name, out)
		}
		got[it.Name] = it.Node
	}
	if !maps.Equal(got, want) || len(top.Warnings) > 0 {
		t.Errorf("vmctl top: VMIs on nodes %v, warnings %v; want %v", got, top.Warnings, want)
	}
}

// buildVmctl builds vmctl into the setup's folder (once) and returns its path.
func buildVmctl(t *testing.T, s *localSetup) string {
	t.Helper()
	vmctl := filepath.Join(s.tmp, "vmctl")
	if _, err := os.Stat(vmctl); err == nil {
		return vmctl
	}
	if out, err := exec.Command("go", "build", "-o", vmctl, "github.com/vmlet/vmlet/cmd/vmctl").CombinedOutput(); err != nil {
		t.Fatalf("build vmctl: %v\n%s", err, out)
	}
	return vmctl
}

// twoNodes is a `vmlet local --nodes 2` of a setup, on a node fabric of its own.
type twoNodes struct {
	p            *localProc
	fabric       network.FabricConfig
	nodes        []string
	plan         []network.FabricNode
	uplinkBefore []string // the uplink namespace's state before the fabric
	kubectl      string
}

// startTwoNodes starts `vmlet local --nodes 2` on a fabric named prefix + 4 hex digits (the
// cleanup removes what a failed test left) and waits until both nodes registered.
func (s *localSetup) startTwoNodes(t *testing.T, prefix string) *twoNodes {
	t.Helper()
	n := &twoNodes{kubectl: filepath.Join(s.assets, "kubectl"), nodes: []string{localNode + "-1", localNode + "-2"}}
	if _, err := os.Stat(n.kubectl); err != nil {
		prereq.Missing(t, "kubectl in the control-plane assets: "+err.Error())
	}
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	n.fabric = network.FabricConfig{Name: prefix + hex.EncodeToString(b), UplinkNetns: s.nodeNetns}
	t.Cleanup(func() { cleanupNodes(t, s, n.fabric, n.nodes) })
	plan, err := network.PlanFabric(n.fabric, n.nodes)
	if err != nil {
		t.Fatal(err)
	}
	n.plan = plan
	n.uplinkBefore = uplinkState(t, s.nodeNetns)
	n.p = s.run(t, append(s.commonArgs(), "--demo", "", "--nodes", "2", "--fabric-name", n.fabric.Name)...)
	n.p.waitOutput(t, "nodes "+strings.Join(n.nodes, ", ")+" registered", 3*time.Minute)
	n.p.waitOutput(t, "multus networks: vmlet-node (each node's own bridge), vmlet-shared (198.19.119.0/24, shared by the nodes", time.Minute)
	return n
}

// kc runs kubectl against the stack and returns its output; a failure fails the test.
func (n *twoNodes) kc(t *testing.T, s *localSetup, args ...string) string {
	t.Helper()
	cmd := exec.Command(n.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(s.stateDir, "kubeconfig"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addressWatch records every version of a VMI the API server sends: its node, its QEMU's pid and
// the address of each interface (status.interfaces, by name).
type addressWatch struct {
	mu   sync.Mutex
	seen []addressVersion
}

type addressVersion struct {
	rv, node string
	pid      int64 // status.launcher.pid
	ips      map[string]string
}

// watchAddresses watches the VMI at key until the test ends.
func watchAddresses(t *testing.T, c client.WithWatch, key client.ObjectKey) *addressWatch {
	t.Helper()
	w, err := c.Watch(context.Background(), &vmletv1.VirtualMachineInstanceList{}, client.InNamespace(key.Namespace),
		client.MatchingFields{"metadata.name": key.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	aw := &addressWatch{}
	go func() {
		for ev := range w.ResultChan() {
			v, ok := ev.Object.(*vmletv1.VirtualMachineInstance)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			av := addressVersion{rv: v.ResourceVersion, node: v.Status.NodeName, ips: map[string]string{}}
			if v.Status.Launcher != nil {
				av.pid = v.Status.Launcher.PID
			}
			for _, i := range v.Status.Interfaces {
				av.ips[i.Name] = i.IP
			}
			aw.mu.Lock()
			aw.seen = append(aw.seen, av)
			aw.mu.Unlock()
		}
	}()
	return aw
}

// until waits until the watch has seen version rv and returns the versions seen so far.
func (aw *addressWatch) until(t *testing.T, rv string) []addressVersion {
	t.Helper()
	var out []addressVersion
	poll.Until(t, 30*time.Second, "the watch sees version "+rv, func() (bool, string) {
		aw.mu.Lock()
		defer aw.mu.Unlock()
		out = slices.Clone(aw.seen)
		return slices.ContainsFunc(out, func(v addressVersion) bool { return v.rv == rv }), fmt.Sprintf("%d versions seen", len(out))
	})
	return out
}
