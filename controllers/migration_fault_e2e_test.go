package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// link is a cuttable network between the test nodes: while cut, every relayed connection
// stalls (nothing is lost or closed, nothing moves), as a dead link does. With a rate, each
// connection's writes go at most that fast (a slow link).
type link struct {
	mu    sync.Mutex
	cut   bool
	rate  int64 // bytes per second of each connection made from now on; 0: unlimited
	dials int   // connections made over the link
	cond  *sync.Cond
}

// slow sets the rate of the connections made from now on (0: unlimited).
func (l *link) slow(rate int64) {
	l.mu.Lock()
	l.rate = rate
	l.mu.Unlock()
}

// dialed is the number of connections made over the link so far.
func (l *link) dialed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dials
}

func newLink() *link {
	l := &link{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *link) set(cut bool) {
	l.mu.Lock()
	l.cut = cut
	l.mu.Unlock()
	l.cond.Broadcast()
}

// wait blocks while the link is cut, unless c was closed (a closed connection's copies end,
// as a relay that closes it expects).
func (l *link) wait(c *linkConn) {
	l.mu.Lock()
	for l.cut && !c.closed {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// waitWrite is wait for a write: like a kernel's, it gives up at the write deadline (a TLS
// close_notify is sent with one).
func (l *link) waitWrite(c *linkConn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.cut && !c.closed {
		if !c.wdl.IsZero() && !time.Now().Before(c.wdl) {
			return os.ErrDeadlineExceeded
		}
		l.cond.Wait()
	}
	return nil
}

type linkConn struct {
	net.Conn
	l      *link
	pace   *rate.Limiter // the link's rate when the connection was made; nil: unlimited
	closed bool          // under l.mu
	wdl    time.Time     // write deadline, under l.mu
}

// paceBurst is the most a slow link's connection sends at once.
const paceBurst = 64 << 10

func (c *linkConn) SetWriteDeadline(t time.Time) error {
	c.l.mu.Lock()
	c.wdl = t
	c.l.mu.Unlock()
	if !t.IsZero() {
		time.AfterFunc(time.Until(t), c.l.cond.Broadcast) // wakes a waitWrite past it
	}
	return c.Conn.SetWriteDeadline(t)
}

func (c *linkConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *linkConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.wait(c)
	return n, err
}

func (c *linkConn) Write(b []byte) (int, error) {
	if err := c.l.waitWrite(c); err != nil {
		return 0, err
	}
	if c.pace == nil {
		return c.Conn.Write(b)
	}
	written := 0
	for len(b) > 0 { // at the link's pace, a burst at a time
		n := min(len(b), paceBurst)
		if err := c.pace.WaitN(context.Background(), n); err != nil {
			return written, err
		}
		m, err := c.Conn.Write(b[:n])
		written += m
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	c.closed = true
	c.l.mu.Unlock()
	c.l.cond.Broadcast()
	return c.Conn.Close()
}

// through makes a node's migration dials go over l.
func through(m *controllers.MigrationNet, l *link) *controllers.MigrationNet {
	dial := m.Dial
	m.Dial = func(ctx context.Context, a string) (net.Conn, error) {
		c, err := dial(ctx, a)
		if err != nil {
			return nil, err
		}
		lc := &linkConn{Conn: c, l: l}
		l.mu.Lock()
		l.dials++
		if l.rate > 0 {
			lc.pace = rate.NewLimiter(rate.Limit(l.rate), paceBurst)
		}
		l.mu.Unlock()
		return lc, nil
	}
	return m
}

// setMigrationConfig writes the cluster's migration configuration (ConfigMap).
func setMigrationConfig(t testing.TB, doc string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{}
	ns.Name = migration.ConfigNamespace
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = migration.ConfigNamespace, migration.ConfigName
	cm.Data = map[string]string{migration.ConfigKey: doc}
	if err := env.Client.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		err = env.Client.Update(ctx, cm)
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

func startMigration(t *testing.T, vmi *vmletv1.VirtualMachineInstance, name string) client.ObjectKey {
	t.Helper()
	m := &vmletv1.VirtualMachineInstanceMigration{}
	m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, name, vmi.Name
	if err := env.Client.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(m)
}

func waitMigrationPhase(t *testing.T, key client.ObjectKey, want vmletv1.VirtualMachineInstanceMigrationPhase) {
	t.Helper()
	eventually(t, time.Minute, key.Name+" phase "+string(want), func() (bool, string) {
		m := &vmletv1.VirtualMachineInstanceMigration{}
		if err := env.Client.Get(context.Background(), key, m); err != nil {
			return false, err.Error()
		}
		return m.Status.Phase == want, string(m.Status.Phase)
	})
}

// assertStaysOn checks that the guest still runs on node, Ready, its counter counting.
func assertStaysOn(t *testing.T, n *twoNodes, vmi *vmletv1.VirtualMachineInstance, node string) {
	t.Helper()
	v := waitCondition(t, client.ObjectKeyFromObject(vmi), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 30*time.Second)
	if v.Status.NodeName != node {
		t.Fatalf("the vmi is on %s, want %s", v.Status.NodeName, node)
	}
	a := n.on(node)
	waitLauncherAgent(t, a, string(v.UID))
	// A guest the migration held paused (stop-and-copy under TCG) may leave its agent a
	// command behind the ones queued while it was stopped: the launcher then reports it lost
	// and back within seconds. What counts is that the counter counts.
	c := -1
	eventually(t, 30*time.Second, "the counter counts on "+node, func() (bool, string) {
		out, err := guestShellErr(a, vmi, "cat /tmp/count")
		if err != nil {
			return false, err.Error()
		}
		d, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			return false, err.Error()
		}
		if c < 0 {
			c = d
		}
		return d > c, fmt.Sprintf("%d, was %d", d, c)
	})
}

// failureReason waits until the failed migration's failureReason contains want and returns the
// migration then: the side that saw the failure first writes the reason (often the target,
// whose stream broke), and the source adds why it ended the stream a moment later.
func failureReason(t *testing.T, key client.ObjectKey, want string) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	var m *vmletv1.VirtualMachineInstanceMigration
	eventually(t, 30*time.Second, key.Name+"'s failure reason saying "+want, func() (bool, string) {
		m = &vmletv1.VirtualMachineInstanceMigration{}
		if err := env.Client.Get(context.Background(), key, m); err != nil {
			return false, err.Error()
		}
		ms := m.Status.MigrationState
		if ms == nil {
			return false, "no migrationState"
		}
		// Mode, configuration and progress say which way a migration went when the reason
		// is not the one expected (a pre-copy that reached its last stage, a stale config).
		return strings.Contains(ms.FailureReason, want), fmt.Sprintf("%s (mode %q, configuration %s, progress %s)",
			ms.FailureReason, ms.Mode, describe(ms.MigrationConfiguration), describe(ms.Progress))
	})
	return m
}

func failureOf(t *testing.T, key client.ObjectKey) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	m := waitMigration(t, key, 2*time.Minute)
	if m.Status.Phase != vmletv1.MigrationFailed {
		t.Fatalf("%s: phase %s, want Failed", key.Name, m.Status.Phase)
	}
	return m
}

// TestMigrationFaults: refusals, an abort, a stalled link, a killed target launcher and a
// killed target QEMU each leave the guest running on its node, Ready, with nothing left on
// the other node; then a migration over the restored link succeeds.
func TestMigrationFaults(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	l := newLink()
	n := startTwoNodes(t, func(m *controllers.MigrationNet) *controllers.MigrationNet { return through(m, l) })
	defer n.stop(t)
	ctx := context.Background()
	// Slow migrations (the guest's 128 MiB take ≈30 s) with a short progress timeout.
	setMigrationConfig(t, "bandwidthPerMigration: 4Mi\nprogressTimeout: 4\n")
	defer setMigrationConfig(t, "")

	vmi := masqueradeVMI("faults")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	bridge := newVMI("faults-bridge") // no interfaces: KubeVirt's auto-attached bridge
	if err := env.Client.Create(ctx, bridge); err != nil {
		t.Fatal(err)
	}
	defer waitDeleted(t, client.ObjectKeyFromObject(bridge))
	defer func() { _ = env.Client.Delete(ctx, bridge) }()
	pending := newVMI("faults-pending")
	pending.Spec.NodeSelector = map[string]string{"vmlet.dev/no-such-node": "x"}
	if err := env.Client.Create(ctx, pending); err != nil {
		t.Fatal(err)
	}
	defer waitDeleted(t, client.ObjectKeyFromObject(pending))
	defer func() { _ = env.Client.Delete(ctx, pending) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = mustGetVMI(t, vmi)
	uid := string(vmi.UID)
	guestCounter(t, n.a, vmi, "faults")

	t.Run("refused", func(t *testing.T) {
		waitCondition(t, client.ObjectKeyFromObject(bridge), vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionFalse, 2*time.Minute)
		for _, tc := range []struct {
			vmi    *vmletv1.VirtualMachineInstance
			reason string
			msg    string
		}{
			{bridge, migration.ReasonNotMigratable, migration.ReasonInterfaceNotMigratable},
			{pending, migration.ReasonVMINotRunning, "not Running"},
			{&vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "faults-none"}}, migration.ReasonVMINotFound, "does not exist"},
		} {
			m := failureOf(t, startMigration(t, tc.vmi, "refuse-"+tc.vmi.Name))
			c := meta.FindStatusCondition(m.Status.Conditions, "Failed")
			if c == nil || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("%s: condition %+v, want reason %s with %q", tc.vmi.Name, c, tc.reason, tc.msg)
			}
		}
		// Ended migrations of one vmi: the 5 newest are kept.
		for i := range 7 {
			failureOf(t, startMigration(t, &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "faults-gc"}}, fmt.Sprintf("gc-%d", i)))
		}
		eventually(t, 20*time.Second, "old migrations collected", func() (bool, string) {
			var l vmletv1.VirtualMachineInstanceMigrationList
			if err := env.Client.List(ctx, &l, client.InNamespace("default")); err != nil {
				return false, err.Error()
			}
			var names []string
			for _, m := range l.Items {
				if m.Spec.VMIName == "faults-gc" {
					names = append(names, m.Name)
				}
			}
			return len(names) == migration.KeepFinished && !slices.Contains(names, "gc-0") && !slices.Contains(names, "gc-1"), fmt.Sprint(names)
		})
		// A second migration while one runs is refused; the first goes on.
		first := startMigration(t, vmi, "refuse-first")
		waitMigrationPhase(t, first, vmletv1.MigrationRunning)
		m := failureOf(t, startMigration(t, vmi, "refuse-second"))
		if c := meta.FindStatusCondition(m.Status.Conditions, "Failed"); c == nil || c.Reason != migration.ReasonInFlight {
			t.Errorf("second migration: condition %+v, want %s", c, migration.ReasonInFlight)
		}
		abort(t, first)
	})

	t.Run("abort", func(t *testing.T) {
		k := startMigration(t, vmi, "abort")
		waitMigrationPhase(t, k, vmletv1.MigrationRunning)
		abort(t, k)
		ms := mustGetVMI(t, vmi).Status.MigrationState
		if ms == nil || !ms.AbortRequested || ms.AbortStatus != vmletv1.MigrationAbortSucceeded || !ms.Failed {
			t.Fatalf("migrationState after the abort %+v", ms)
		}
		assertStaysOn(t, n, vmi, testNode)
		waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
	})

	// cutMidway cuts the link under the running migration k: the progress timeout fails it,
	// the guest stays, and the target node is left clean once the link is back.
	cutMidway := func(t *testing.T, k client.ObjectKey) {
		t.Helper()
		l.set(true)
		failureOf(t, k)
		l.set(false)
		failureReason(t, k, "no progress for 4s")
		assertStaysOn(t, n, vmi, testNode)
		waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
	}

	t.Run("link cut", func(t *testing.T) {
		k := startMigration(t, vmi, "cut")
		waitMigrationPhase(t, k, vmletv1.MigrationRunning)
		cutMidway(t, k)
	})

	t.Run("link cut, parallel streams", func(t *testing.T) {
		// No bandwidth limit, so the guest's memory goes over multifd channels, on a slow link
		// (one stream at 4 MiB/s took ≈30 s, three at 2 MiB/s each take ≈20 s). QEMU's cancel
		// ends only its main channel: the agent cuts the relays off to end the others' writes.
		setMigrationConfig(t, "progressTimeout: 4\n")
		defer setMigrationConfig(t, "bandwidthPerMigration: 4Mi\nprogressTimeout: 4\n")
		before := l.dialed()
		l.slow(2 << 20)
		defer l.slow(0)
		k := startMigration(t, vmi, "cut-streams")
		waitMigrationPhase(t, k, vmletv1.MigrationRunning)
		eventually(t, 30*time.Second, "the migration's streams dialed", func() (bool, string) {
			got := l.dialed() - before
			return got >= 1+controllers.MigrationChannels, fmt.Sprintf("%d connections", got)
		})
		cutMidway(t, k)
	})

	for _, victim := range []string{"target launcher", "target qemu"} {
		t.Run(victim+" killed", func(t *testing.T) {
			k := startMigration(t, vmi, "kill-"+strings.ReplaceAll(victim, " ", "-"))
			waitMigrationPhase(t, k, vmletv1.MigrationRunning)
			st, err := n.b.runtime.State(uid)
			if err != nil {
				t.Fatal(err)
			}
			pid := st.Pid
			if victim == "target qemu" {
				pid = qemuPid(t, n.b, uid)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			m := failureOf(t, k)
			t.Logf("%s: %s", victim, m.Status.MigrationState.FailureReason)
			assertStaysOn(t, n, vmi, testNode)
			waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
		})
	}

	for _, node := range []string{secondNode, testNode} {
		t.Run("agent of "+node+" restarted", func(t *testing.T) {
			k := startMigration(t, vmi, "restart-"+node)
			waitMigrationPhase(t, k, vmletv1.MigrationRunning)
			n.restart(t, node)
			m := failureOf(t, k)
			t.Logf("agent of %s restarted: %s", node, m.Status.MigrationState.FailureReason)
			assertStaysOn(t, n, vmi, testNode)
			waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
		})
	}

	t.Run("then it migrates", func(t *testing.T) {
		setMigrationConfig(t, "")
		m := migrate(t, vmi, "after-faults")
		if m.Status.Phase != vmletv1.MigrationSucceeded {
			t.Fatalf("phase %s: %+v", m.Status.Phase, m.Status.MigrationState)
		}
		assertStaysOn(t, n, vmi, secondNode)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("completion timeout with disruption allowed pauses the guest", func(t *testing.T) {
		// 128 MiB at 16 MiB/s take ≈8 s; after 2 s (completionTimeoutPerGiB: 2, for at least
		// 1 GiB) the guest is paused so that the rest converges; it runs again on the target.
		setMigrationConfig(t, "bandwidthPerMigration: 16Mi\ncompletionTimeoutPerGiB: 2\nallowWorkloadDisruption: true\n")
		m := migrate(t, vmi, "disruption")
		if m.Status.Phase != vmletv1.MigrationSucceeded || m.Status.MigrationState.Mode != vmletv1.MigrationPaused {
			t.Fatalf("phase %s, mode %s: %+v", m.Status.Phase, m.Status.MigrationState.Mode, m.Status.MigrationState)
		}
		v := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionFalse, 30*time.Second)
		assertStaysOn(t, n, vmi, v.Status.NodeName)
		if v.Status.NodeName != testNode {
			t.Fatalf("on %s, want %s", v.Status.NodeName, testNode)
		}
		// Without it, the same migration is aborted at the completion timeout.
		setMigrationConfig(t, "bandwidthPerMigration: 16Mi\ncompletionTimeoutPerGiB: 2\n")
		k := startMigration(t, vmi, "no-disruption")
		failureOf(t, k)
		failureReason(t, k, "(completionTimeoutPerGiB)")
		assertStaysOn(t, n, vmi, testNode)
		setMigrationConfig(t, "")
	})

	t.Run("paused guests migrate paused", func(t *testing.T) {
		setPaused(t, key, true)
		from := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionTrue, 30*time.Second).Status.NodeName
		to := testNode
		if from == testNode {
			to = secondNode
		}
		m := migrate(t, vmi, "paused")
		if m.Status.Phase != vmletv1.MigrationSucceeded {
			t.Fatalf("phase %s: %s", m.Status.Phase, m.Status.MigrationState.FailureReason)
		}
		v := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionTrue, 30*time.Second)
		if v.Status.NodeName != to {
			t.Fatalf("on %s, want %s", v.Status.NodeName, to)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := launcher.Dial(ctx, n.on(to).runtime.Socket(uid))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if d, err := c.GetDomain(ctx); err != nil || d.GetState().String() != "STATE_PAUSED" {
			t.Fatalf("the target's domain: %v %v, want paused", d.GetState(), err)
		}
		setPaused(t, key, false)
		assertStaysOn(t, n, vmi, to)
	})
}

// abort deletes a migration and waits until it is gone.
func abort(t *testing.T, key client.ObjectKey) {
	t.Helper()
	m := &vmletv1.VirtualMachineInstanceMigration{}
	m.Namespace, m.Name = key.Namespace, key.Name
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, key.Name+" deleted", func() (bool, string) {
		err := env.Client.Get(context.Background(), key, m)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v %s", err, m.Status.Phase)
	})
}

// qemuPid is the pid of the QEMU the vmi's launcher on a node runs.
func qemuPid(t *testing.T, a *agent, uid string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(uid))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.GetDomain(ctx)
	if err != nil || d.GetPid() == 0 {
		t.Fatalf("qemu pid: %v (domain %v)", err, d)
	}
	return int(d.GetPid())
}

// TestMigrationSourceKilledAfterSwitchover: the source's QEMU dies after the switchover but
// before the source cleaned up (its launcher is frozen while the migration completes, then QEMU
// is killed): the target keeps the guest (its processes survive), the migration succeeds and
// the source node is left clean.
func TestMigrationSourceKilledAfterSwitchover(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	n := startTwoNodes(t)
	defer n.stop(t)
	ctx := context.Background()
	setMigrationConfig(t, "bandwidthPerMigration: 16Mi\n") // 128 MiB: ≈8 s, time to freeze the launcher
	defer setMigrationConfig(t, "")
	vmi := masqueradeVMI("src-killed")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = mustGetVMI(t, vmi)
	uid := string(vmi.UID)
	pid := guestCounter(t, n.a, vmi, "src-killed")
	qemu := qemuPid(t, n.a, uid)
	st, err := n.a.runtime.State(uid)
	if err != nil {
		t.Fatal(err)
	}

	k := startMigration(t, vmi, "src-killed")
	waitMigrationPhase(t, k, vmletv1.MigrationRunning)
	if err := syscall.Kill(st.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(st.Pid, syscall.SIGCONT)
		}
	}()
	eventually(t, time.Minute, "the target took the vmi over", func() (bool, string) {
		v := mustGetVMI(t, vmi)
		return v.Status.NodeName == secondNode, v.Status.NodeName
	})
	if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	m := waitMigration(t, k, 2*time.Minute)
	if m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("phase %s: %+v", m.Status.Phase, m.Status.MigrationState)
	}
	assertStaysOn(t, n, vmi, secondNode)
	if got := strings.TrimSpace(guestShell(t, n.b, vmi, "cat /tmp/counter.pid")); got != pid {
		t.Fatalf("counter pid %q on the target, want %s", got, pid)
	}
	guestShell(t, n.b, vmi, "kill -0 "+pid)
	waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
}

// describe is v as JSON, for a test's failure message.
func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
