package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/pki"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

const secondNode = "node-b"

// twoNodes are two node agents (testNode and secondNode, each with its own run folder, volume
// folder and node network namespace) and the migration controller, which places every
// migration target on the other node.
type twoNodes struct {
	a, b         *agent
	optsA, optsB agentOptions
	dirsB        *testNodeDirs
	cancel       context.CancelFunc
	done         chan error
}

// loopbackMigration is a node's migration network on a loopback address of its own: the
// agents' relays are what is tested here; the node fabric (separate node namespaces with
// their own addresses) is the local mode's (local/).
func loopbackMigration(t testing.TB, ca *pki.CA, node, addr string) *controllers.MigrationNet {
	var d net.Dialer
	ip := netip.MustParseAddr(addr)
	creds := &controllers.NodeCreds{CA: ca, Node: pki.Node{Name: node, Addrs: []netip.Addr{ip}}}
	return &controllers.MigrationNet{
		Addr:   ip,
		Listen: func(a string) (net.Listener, error) { return net.Listen("tcp", a) },
		Dial:   func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) },
		TLS:    creds,
	}
}

func startTwoNodes(t testing.TB, wrap ...func(*controllers.MigrationNet) *controllers.MigrationNet) *twoNodes {
	return startTwoNodesWith(t, nil, wrap...)
}

// startTwoNodesWith is startTwoNodes whose agents pull images from sources too.
func startTwoNodesWith(t testing.TB, sources map[string]string, wrap ...func(*controllers.MigrationNet) *controllers.MigrationNet) *twoNodes {
	t.Helper()
	return startTwoNodesOpts(t, sources, nil, wrap...)
}

// startTwoNodesOpts is startTwoNodesWith whose agents' options both go through set (nil: none).
func startTwoNodesOpts(t testing.TB, sources map[string]string, set func(*agentOptions), wrap ...func(*controllers.MigrationNet) *controllers.MigrationNet) *twoNodes {
	t.Helper()
	dir := filepath.Join(tmpRoot, "node-b")
	pods := filepath.Join(testNet.dir, "pods-b")
	if err := os.MkdirAll(pods, 0o755); err != nil {
		t.Fatal(err)
	}
	nodeNS := filepath.Join(testNet.dir, "node-b")
	if err := createNetns(nodeNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeNetns(nodeNS); err != nil {
			t.Error(err)
		}
	})
	cg := filepath.Join(cgroupParent, secondNode) // launcher cgroups are named by vmi: one parent per node
	if err := os.Mkdir(cg, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	dirs := &testNodeDirs{Name: secondNode, RunRoot: filepath.Join(dir, "run"), VolumeRoot: filepath.Join(dir, "volumes"),
		CgroupParent: cg, Net: network.NodeConfig{NetnsPath: nodeNS, NetnsDir: pods}}
	n := &twoNodes{dirsB: dirs, done: make(chan error, 1)}
	ca, err := pki.NewCA(pki.CAOptions{CommonName: "vmlet migration test CA"})
	if err != nil {
		t.Fatal(err)
	}
	ma, mb := loopbackMigration(t, ca, testNode, "127.0.0.1"), loopbackMigration(t, ca, secondNode, "127.0.0.2")
	for _, w := range wrap {
		ma, mb = w(ma), w(mb)
	}
	n.optsA = agentOptions{Migration: ma, ImageSources: sources}
	n.optsB = agentOptions{Node: dirs, NoScheduler: true, Migration: mb, ImageSources: sources}
	if set != nil {
		set(&n.optsA)
		set(&n.optsB)
	}
	n.a = startAgent(t, n.optsA)
	n.b = startAgent(t, n.optsB)
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: controllerConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	mc := &migration.Controller{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("vmlet-migration"), APIReader: mgr.GetAPIReader(),
		Pick: func(_ context.Context, req migration.TargetRequest) (migration.Target, error) {
			if req.VMI.Status.NodeName == testNode {
				return migration.Target{Node: secondNode}, nil
			}
			return migration.Target{Node: testNode}, nil
		}}
	if err := mc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- mgr.Start(ctx) }()
	return n
}

func (n *twoNodes) stop(t testing.TB) {
	t.Helper()
	n.cancel()
	if err := <-n.done; err != nil {
		t.Errorf("migration controller: %v", err)
	}
	n.b.stop(t)
	n.a.stop(t)
}

// on is the agent of a node.
func (n *twoNodes) on(node string) *agent {
	if node == secondNode {
		return n.b
	}
	return n.a
}

// migrate creates a migration of vmi and waits until it ends; it returns the migration.
func migrate(t testing.TB, vmi *vmletv1.VirtualMachineInstance, name string) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	m := &vmletv1.VirtualMachineInstanceMigration{}
	m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, name, vmi.Name
	if err := env.Client.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return waitMigration(t, client.ObjectKeyFromObject(m), 2*time.Minute)
}

func waitMigration(t testing.TB, key client.ObjectKey, d time.Duration) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	m := &vmletv1.VirtualMachineInstanceMigration{}
	eventually(t, d, key.Name+" ended", func() (bool, string) {
		if err := env.Client.Get(context.Background(), key, m); err != nil {
			return false, err.Error()
		}
		desc := fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
		v := &vmletv1.VirtualMachineInstance{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: key.Namespace, Name: m.Spec.VMIName}, v); err == nil {
			state, _ := json.Marshal(v.Status.MigrationState) // with its progress, not pointers
			desc += "; vmi " + summary(v) + " migrationState " + string(state)
		}
		return migration.Final(m.Status.Phase), desc
	})
	return m
}

// readyWatch records every status of one condition (Ready, or another) the vmi's updates
// carry until stopped.
type readyWatch struct {
	mu   sync.Mutex
	seen []string
	stop func()
}

func watchReady(t *testing.T, vmi *vmletv1.VirtualMachineInstance) *readyWatch {
	t.Helper()
	return watchCondition(t, vmi, vmletv1.VirtualMachineInstanceReady)
}

func watchCondition(t *testing.T, vmi *vmletv1.VirtualMachineInstance, typ string) *readyWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &vmletv1.VirtualMachineInstanceList{}, client.InNamespace(vmi.Namespace),
		client.MatchingFields{"metadata.name": vmi.Name})
	if err != nil {
		t.Fatal(err)
	}
	rw := &readyWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			v, ok := ev.Object.(*vmletv1.VirtualMachineInstance)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			c := meta.FindStatusCondition(v.Status.Conditions, typ)
			s := "none"
			if c != nil {
				s = string(c.Status) + "/" + c.Reason
			}
			rw.mu.Lock()
			rw.seen = append(rw.seen, v.Status.NodeName+":"+s)
			rw.mu.Unlock()
		}
	}()
	return rw
}

// notReady lists the statuses seen that were not True.
func (rw *readyWatch) notReady() []string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var out []string
	for _, s := range rw.seen {
		if !strings.Contains(s, ":True/") {
			out = append(out, s)
		}
	}
	return out
}

// guestCounter starts a counter in the guest's memory (a shell loop writing to tmpfs, by
// rename so that a reader never sees a half-written file) and a token, and returns the loop's
// pid.
func guestCounter(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance, token string) string {
	t.Helper()
	guestShell(t, a, v, "echo "+token+" > /tmp/token; (i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/counter.pid")
	return strings.TrimSpace(guestShell(t, a, v, "cat /tmp/counter.pid"))
}

func guestCount(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(guestShell(t, a, v, "cat /tmp/count")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLeft waits until the node agent a has nothing of the vmi any more: no launcher, run
// folder, pod network namespace or volume folder.
func waitLeft(t testing.TB, a *agent, netnsDir, volumes string, uid string) {
	t.Helper()
	eventually(t, 30*time.Second, a.r.NodeName+" cleaned up", func() (bool, string) {
		if _, err := a.runtime.State(uid); !errors.Is(err, process.ErrNotFound) {
			return false, fmt.Sprintf("launcher still there: %v", err)
		}
		for _, p := range []string{a.runtime.Dir(uid), filepath.Join(netnsDir, "vmlet-"+uid), filepath.Join(volumes, uid)} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				return false, fmt.Sprintf("%s left: %v", p, err)
			}
		}
		return true, ""
	})
}

// TestMigrateBetweenNodes: a running guest with a masquerade interface moves to the other node
// through a VirtualMachineInstanceMigration and back again. Its memory state survives (a counter
// process keeps counting, a token in tmpfs stays), Ready never drops, the migration goes through
// KubeVirt's phases, migrationState says who, where and how, the target's QMP log shows the
// incoming migration (multifd, no TLS creds in QEMU), every connection between the nodes
// speaks TLS from its first byte (the memory stream's channels and the disk copy), and the
// node the guest left has nothing of it.
func TestMigrateBetweenNodes(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	w := &wire{}
	n := startTwoNodes(t, w.tap)
	defer n.stop(t)
	vmi := masqueradeVMI("mig")
	// A node-local disk: copied with the migration (block mirror), the guest writing to it.
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: "scratch"})
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, vmletv1.Volume{Name: "scratch",
		VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}})
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(context.Background(), vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	if vmi.Status.NodeName != testNode {
		t.Fatalf("runs on %s, want %s", vmi.Status.NodeName, testNode)
	}
	uid := string(vmi.UID)
	pid := guestCounter(t, n.a, vmi, "tok-"+uid[:8])
	disk := scratchDevice(t, n.a, vmi)
	guestShell(t, n.a, vmi, "printf disk-"+uid[:8]+" | dd of="+disk+" bs=512 seek=100 conv=notrunc,fsync 2>/dev/null")
	rw := watchReady(t, vmi)
	defer rw.stop()

	from, to := testNode, secondNode
	for i, name := range []string{"mig-there", "mig-back"} {
		before := guestCount(t, n.on(from), vmi)
		// The guest writes the count to its disk all along the migration.
		guestShell(t, n.on(from), vmi, "(while true; do printf '%08d' $(cat /tmp/count) | dd of="+disk+" bs=512 seek=200 conv=notrunc,fsync 2>/dev/null; sleep 0.05; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/writer.pid")
		m := migrate(t, vmi, name)
		if ms := m.Status.MigrationState; ms != nil && ms.SourceDomain != nil {
			t.Logf("%s: source layout %+v", name, *ms.SourceDomain)
		}
		if m.Status.Phase != vmletv1.MigrationSucceeded {
			t.Fatalf("%s: phase %s, state %+v, conditions %+v", name, m.Status.Phase, m.Status.MigrationState, m.Status.Conditions)
		}
		var phases []string
		for _, p := range m.Status.PhaseTransitionTimestamps {
			phases = append(phases, string(p.Phase))
		}
		if got := strings.Join(phases, " "); got != "Pending Scheduling Scheduled PreparingTarget TargetReady Running Succeeded" {
			t.Errorf("%s: phases %s", name, got)
		}
		vmi = mustGetVMI(t, vmi)
		ms := vmi.Status.MigrationState
		switch {
		case vmi.Status.NodeName != to:
			t.Fatalf("%s: the vmi is on %s, want %s", name, vmi.Status.NodeName, to)
		case ms == nil || ms.MigrationUID != m.UID || ms.SourceNode != from || ms.TargetNode != to || !ms.Completed || ms.Failed:
			t.Fatalf("%s: migrationState %+v", name, ms)
		case ms.StartTimestamp == nil || ms.EndTimestamp == nil || ms.TargetNodeDomainReadyTimestamp == nil || !ms.TargetNodeDomainDetected:
			t.Fatalf("%s: migrationState timestamps %+v", name, ms)
		case ms.TargetNodeAddress == "" || len(ms.TargetDirectMigrationNodePorts) != 2 || ms.SourceDomain == nil || ms.MigrationConfiguration == nil:
			t.Fatalf("%s: migrationState target and layout %+v", name, ms)
		case vmi.Status.Machine == nil || !strings.HasPrefix(vmi.Status.Machine.Type, "pc-q35-"):
			t.Errorf("%s: status.machine %+v, want the versioned q35 type", name, vmi.Status.Machine)
		case vmi.Status.MigrationMethod != vmletv1.BlockMigration:
			t.Errorf("%s: migrationMethod %q", name, vmi.Status.MigrationMethod)
		}
		if ms.Progress == nil || ms.Progress.DataTotalBytes == 0 {
			t.Errorf("%s: no progress recorded: %+v", name, ms.Progress)
		} else {
			t.Logf("%s: downtime %d ms, total %d ms, %d MiB sent in %d passes", name, ms.Progress.DowntimeMilliseconds,
				ms.Progress.TotalTimeMilliseconds, ms.Progress.DataProcessedBytes>>20, ms.Progress.Iteration)
		}
		if l := vmi.Status.Launcher; l != nil && qemu.LiveMigrationLosesWrites(string(l.Accelerator), l.QEMUVersion) {
			// Stop-and-copy: the guest stood still for the whole transfer, and says so.
			waitEventAbout(t, vmi, "Normal", "MigrationStopAndCopy")
			if p := ms.Progress; p == nil || p.DowntimeMilliseconds < p.TotalTimeMilliseconds {
				t.Errorf("%s: downtime of a stop-and-copy migration %+v, want at least its total time", name, p)
			}
		}
		waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 10*time.Second)
		ta := n.on(to)
		waitLauncherAgent(t, ta, uid)
		if got := strings.TrimSpace(guestShell(t, ta, vmi, "cat /tmp/counter.pid")); got != pid {
			t.Fatalf("%s: counter pid %s, want %s (the guest's memory did not survive)", name, got, pid)
		}
		if got := strings.TrimSpace(guestShell(t, ta, vmi, "cat /tmp/token")); got != "tok-"+uid[:8] {
			t.Fatalf("%s: token %q", name, got)
		}
		eventually(t, 10*time.Second, "the counter counts on "+to, func() (bool, string) {
			c := guestCount(t, ta, vmi)
			return c > before, fmt.Sprintf("count %d, before the migration %d", c, before)
		})
		// The disk as the target has it (page cache dropped): what was written before, and the
		// writer's last count, at least the one it wrote when the migration began.
		guestShell(t, ta, vmi, "kill $(cat /tmp/writer.pid); sync; echo 3 > /proc/sys/vm/drop_caches")
		if got := guestShell(t, ta, vmi, "dd if="+disk+" bs=512 skip=100 count=1 2>/dev/null | head -c 13"); got != "disk-"+uid[:8] {
			t.Fatalf("%s: the disk on %s has %q, want the mark written before", name, to, got)
		}
		last, err := strconv.Atoi(guestShell(t, ta, vmi, "dd if="+disk+" bs=512 skip=200 count=1 2>/dev/null | head -c 8"))
		if err != nil || last < before {
			t.Fatalf("%s: the disk's count %d (%v), want at least %d", name, last, err, before)
		}
		if i == 0 {
			assertIncomingLogged(t, ta, uid)
		}
		assertTLSWire(t, name, w.take())
		netnsDir, volumes := testNet.cfg.NetnsDir, volumeRoot
		if from == secondNode {
			netnsDir, volumes = n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot
		}
		waitLeft(t, n.on(from), netnsDir, volumes, uid)
		from, to = to, from
	}
	if bad := rw.notReady(); len(bad) > 0 {
		t.Errorf("Ready dropped during the migrations: %v", bad)
	}
}

// assertTLSWire checks the connections one migration dialed between the nodes: the memory
// stream's (1 + MigrationChannels) and the disk copy's, each starting with a TLS handshake
// record (content type 22, version 3.x) rather than QEMU's own bytes.
func assertTLSWire(t *testing.T, name string, heads [][]byte) {
	t.Helper()
	if want := 1 + controllers.MigrationChannels + 1; len(heads) < want {
		t.Errorf("%s: %d connections between the nodes, want at least %d (main stream, %d multifd channels, disk copy)",
			name, len(heads), want, controllers.MigrationChannels)
	}
	for i, h := range heads {
		if len(h) < 3 || h[0] != 22 || h[1] != 3 {
			t.Errorf("%s: connection %d between the nodes starts with % x, not a TLS handshake", name, i, h)
		}
	}
}

// assertIncomingLogged checks the target launcher's QMP log for the incoming migration: over
// multifd channels, with no TLS creds in QEMU (the agents' relays encrypt).
func assertIncomingLogged(t *testing.T, a *agent, uid string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(uid))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := map[string]bool{}
	err = c.QMPLog(ctx, 10000, false, func(e *pb.QMPLogEntry) error {
		s := e.String()
		for _, w := range []string{"migrate-incoming", "tls-creds-x509", "nbd-server-start", "block-export-add", "multifd-channels"} {
			if strings.Contains(s, w) {
				seen[w] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"migrate-incoming", "nbd-server-start", "block-export-add", "multifd-channels"} {
		if !seen[w] {
			t.Errorf("the target's QMP log has no %s", w)
		}
	}
	if seen["tls-creds-x509"] {
		t.Errorf("the target's QEMU was given TLS creds: the relays encrypt, QEMU holds no key")
	}
}

// waitLauncherAgent waits until the vmi's launcher on a node talks to the guest agent.
func waitLauncherAgent(t testing.TB, a *agent, uid string) {
	t.Helper()
	waitLauncherAgentFor(t, a, uid, 30*time.Second)
}

// waitLauncherAgentFor is waitLauncherAgent with a deadline of d.
func waitLauncherAgentFor(t testing.TB, a *agent, uid string, d time.Duration) {
	t.Helper()
	eventually(t, d, "guest agent connected on "+a.r.NodeName, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := launcher.Dial(ctx, a.runtime.Socket(uid))
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		d, err := c.GetDomain(ctx)
		if err != nil {
			return false, err.Error()
		}
		if d.GetAgentConnected() {
			return true, ""
		}
		// A guest agent that stays silent is often a guest that died: its console says.
		console, _ := os.ReadFile(launcher.Paths{Root: a.runtime.Dir(uid)}.SerialLog())
		return false, d.GetState().String() + "; the guest's console ends: " + tail(console)
	})
}

// scratchDevice is the guest's block device of the scratch disk (the only virtio disk).
func scratchDevice(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) string {
	t.Helper()
	var dev string
	eventually(t, 20*time.Second, "the guest's disk", func() (bool, string) {
		dev = strings.TrimSpace(guestShell(t, a, v, "ls /dev/vd* 2>/dev/null | head -1"))
		return dev != "", dev
	})
	return dev
}

// restart stops a node's agent (its relays go with it, as with a killed agent process) and
// starts a new one; launchers and QEMU keep running.
func (n *twoNodes) restart(t *testing.T, node string) {
	t.Helper()
	if node == secondNode {
		n.b.stop(t)
		n.b = startAgent(t, n.optsB)
		return
	}
	n.a.stop(t)
	n.a = startAgent(t, n.optsA)
}

// TestMigrateKubeVirtExample migrates KubeVirt's vmi-migratable example (containerDisk and
// masquerade, only apiVersion changed; its image served by the test guest's bootable disk)
// there and back: what the guest wrote to its containerDisk (the node-local overlay, copied
// shallow: the target pulls the image itself) is on the target's disk.
func TestMigrateKubeVirtExample(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	ref := bootDiskLayout(t)
	n := startTwoNodesWith(t, map[string]string{"registry:5000/kubevirt/alpine-container-disk-demo:devel": ref})
	defer n.stop(t)
	vmi := kubevirtFixture(t, "vmi-migratable.yaml")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(context.Background(), vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 3*time.Minute)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	uid := string(vmi.UID)
	disk := scratchDevice(t, n.a, vmi) // the containerDisk: the only virtio disk
	mark := "overlay-" + uid[:8]
	guestShell(t, n.a, vmi, "printf "+mark+" | dd of="+disk+" bs=512 seek=120000 conv=notrunc,fsync 2>/dev/null")
	from, to := testNode, secondNode
	for _, name := range []string{"kv-there", "kv-back"} {
		m := migrate(t, vmi, name)
		if m.Status.Phase != vmletv1.MigrationSucceeded {
			t.Fatalf("%s: phase %s: %s", name, m.Status.Phase, m.Status.MigrationState.FailureReason)
		}
		vmi = mustGetVMI(t, vmi)
		if vmi.Status.NodeName != to || vmi.Status.MigrationMethod != vmletv1.BlockMigration {
			t.Fatalf("%s: on %s (%s), want %s", name, vmi.Status.NodeName, vmi.Status.MigrationMethod, to)
		}
		ta := n.on(to)
		waitLauncherAgent(t, ta, uid)
		got := guestShell(t, ta, vmi, "sync; echo 3 > /proc/sys/vm/drop_caches; dd if="+disk+" bs=512 skip=120000 count=1 2>/dev/null | head -c "+strconv.Itoa(len(mark)))
		if got != mark {
			t.Fatalf("%s: the containerDisk on %s has %q, want the mark written on the first node", name, to, got)
		}
		from, to = to, from
	}
	_ = from
}
