package clustere2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/procstatus"
)

// freeAddr is a loopback address with a port free right now (for a process to bind next).
func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		// The kernel may give a port just closed again: two processes of one cluster were
		// once handed the same one.
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
	t.Fatal("no free port not handed out before")
	return ""
}

// handedOut are the addresses freeAddr gave, never given twice in one test binary.
var handedOut = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// probe GETs http://addr/path: the status code and body ("" and the error when nothing
// answered).
func probe(addr, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitProbe waits until GET path on addr answers code with a body that has every want.
func waitProbe(t *testing.T, name, addr, path string, code int, want ...string) string {
	t.Helper()
	var body string
	poll.Until(t, time.Minute, fmt.Sprintf("%s %s answers %d", name, path, code), func() (bool, string) {
		got, b, err := probe(addr, path)
		body = b
		if err != nil || got != code {
			return false, fmt.Sprintf("%d %q %v", got, b, err)
		}
		for _, w := range want {
			if !strings.Contains(b, w) {
				return false, fmt.Sprintf("%d %q lacks %q", got, b, w)
			}
		}
		return true, ""
	})
	return body
}

// TestClusterHealthAndUnresponsiveNode runs the controller and the agent (heartbeat every
// second) as processes with kubeletsim:
//   - both answer /healthz and /readyz over HTTP;
//   - the agent's /readyz fails, naming the VMI, while its launcher does not answer (SIGSTOP),
//     and recovers on SIGCONT;
//   - the agent killed with SIGKILL → within 3 heartbeats the controller labels the node
//     vmlet.dev/schedulable=false and both VMIs Ready=False NodeUnresponsive (still Running:
//     their launcher pods live); one's launcher pod deleted → that VMI Failed, reason
//     NodeUnresponsive;
//   - the agent started again → the node is schedulable again and the other VMI Ready again.
func TestClusterHealthAndUnresponsiveNode(t *testing.T) {
	const beat = time.Second
	c := startClusterWith(t, clusterOptions{heartbeat: beat})
	ctx := context.Background()
	cl := c.env.Client
	for name, addr := range map[string]string{"controller": c.controllerHealth, "agent": c.agentHealth} {
		waitProbe(t, name, addr, "/healthz", http.StatusOK, "ok")
		waitProbe(t, name, addr, "/readyz", http.StatusOK, "ok")
	}
	verbose := waitProbe(t, "agent", c.agentHealth, "/readyz?verbose", http.StatusOK, "api-server", "caches", "launchers")
	t.Logf("agent /readyz?verbose:\n%s", verbose)
	// The node's status: the facts, and the metrics address vmctl top scrapes (port 0 was
	// asked for: the one published is the bound one, and it serves Prometheus text).
	node := &corev1.Node{}
	if err := cl.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{controllers.AnnotQEMUVersion, controllers.AnnotCPUModel, controllers.AnnotDefaultCPUModel, controllers.AnnotMetricsAddress} {
		if node.Annotations[k] == "" {
			t.Errorf("node annotation %s empty (annotations %v)", k, node.Annotations)
		}
	}
	if addr := node.Annotations[controllers.AnnotMetricsAddress]; addr != "" {
		waitProbe(t, "agent", addr, "/metrics", http.StatusOK, "# TYPE controller_runtime_reconcile_total counter")
	}

	vmi, gone := guestvmi.VMI("health", guestImage), guestvmi.VMI("health-gone", guestImage)
	for _, v := range []*vmletv1.VirtualMachineInstance{vmi, gone} {
		if err := cl.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	key, goneKey := client.ObjectKeyFromObject(vmi), client.ObjectKeyFromObject(gone)
	isReady := func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	}
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready", isReady)
	c.waitVMI(t, goneKey, 3*time.Minute, "Ready", isReady)
	waitProbe(t, "agent", c.agentHealth, "/readyz", http.StatusOK)

	// A launcher that does not answer makes the agent unready, naming its VMI.
	qs, err := procstatus.Read(int(ready.Status.Launcher.PID))
	if err != nil {
		t.Fatal(err)
	}
	launcherPid := qs.PPid
	if err := syscall.Kill(launcherPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(launcherPid, syscall.SIGCONT)
		}
	}()
	body := waitProbe(t, "agent", c.agentHealth, "/readyz", http.StatusInternalServerError, "launchers", key.String())
	t.Logf("agent /readyz with launcher %d stopped: %s", launcherPid, body)
	if err := syscall.Kill(launcherPid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitProbe(t, "agent", c.agentHealth, "/readyz", http.StatusOK)

	// The agent dies: the node goes unschedulable within 3 heartbeats.
	c.killAgent(t)
	killed := time.Now()
	c.waitNode(t, 3*beat+5*time.Second, "schedulable=false", func(n *corev1.Node) bool {
		return n.Labels[controllers.LabelSchedulable] == "false"
	})
	took := time.Since(killed)
	t.Logf("node unschedulable %s after the agent was killed (heartbeat %s)", took.Round(time.Millisecond), beat)
	// Stale means its last beat is over 3 intervals old; the last came at most one interval
	// before the kill. Controller latency (a watch event, one patch) gets one more interval.
	if took > 3*beat+beat {
		t.Errorf("node unschedulable %s after the kill, want within 3 heartbeats (%s) and a beat of slack", took, 3*beat)
	}
	for _, k := range []client.ObjectKey{key, goneKey} {
		unresponsive := c.waitVMI(t, k, 30*time.Second, "Ready=False NodeUnresponsive", func(v *vmletv1.VirtualMachineInstance) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
			return cond != nil && cond.Reason == string(vmistatus.ReasonNodeUnresponsive)
		})
		if unresponsive.Status.Phase != vmletv1.Running {
			t.Errorf("%s: phase %s with its launcher pod alive, want Running", k, unresponsive.Status.Phase)
		}
	}
	// One launcher pod goes (the kubelet still runs, the agent does not): its VMI fails, with
	// the reason.
	gonePod := c.launcherPod(t, string(gone.UID))
	if err := cl.Delete(ctx, gonePod); err != nil {
		t.Fatal(err)
	}
	failed := c.waitVMI(t, goneKey, time.Minute, "Failed", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Failed
	})
	if failed.Status.Reason != string(vmistatus.ReasonNodeUnresponsive) {
		t.Errorf("%s failed with reason %q, want NodeUnresponsive", goneKey, failed.Status.Reason)
	}
	if v := c.getVMI(t, key); v.Status.Phase != vmletv1.Running {
		t.Errorf("%s: phase %s while its pod lives, want Running", key, v.Status.Phase)
	}
	waitProbe(t, "controller", c.controllerHealth, "/readyz", http.StatusOK)

	// The agent is back: schedulable again, the VMI Ready again.
	c.startAgent(t)
	c.waitNode(t, time.Minute, "schedulable=true", func(n *corev1.Node) bool {
		return n.Labels[controllers.LabelSchedulable] == "true"
	})
	c.waitVMI(t, key, time.Minute, "Ready again", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Running && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	waitProbe(t, "agent", c.agentHealth, "/readyz", http.StatusOK)

	for _, v := range []*vmletv1.VirtualMachineInstance{vmi, gone} {
		if err := cl.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 2*time.Minute, "VMIs gone", func() (bool, string) {
		err := cl.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		gerr := cl.Get(ctx, goneKey, &vmletv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(gerr), fmt.Sprint(err, gerr)
	})
	// The node would go stale once this test's agent stops (and its 1 s interval is
	// published): the next test's agent registers it afresh.
	c.stopAgent(t)
	if err := cl.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func (c *cluster) getVMI(t *testing.T, key client.ObjectKey) *vmletv1.VirtualMachineInstance {
	t.Helper()
	v := &vmletv1.VirtualMachineInstance{}
	if err := c.env.Client.Get(context.Background(), key, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitNode waits until ok holds for the cluster's node.
func (c *cluster) waitNode(t *testing.T, d time.Duration, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	poll.Until(t, d, "node "+what, func() (bool, string) {
		n := &corev1.Node{}
		if err := c.env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName}, n); err != nil {
			return false, err.Error()
		}
		return ok(n), fmt.Sprintf("labels %v annotations %v", n.Labels, n.Annotations)
	})
}
