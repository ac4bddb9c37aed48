package realclustere2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestSubresourcesByName: vmctl reaches a VMI by name through the aggregated API
// (subresources.vmlet.dev: kube-apiserver → its front proxy → the APIService's Service, routed
// by kube-proxy, → vmlet controller → the node agent's stream → the launcher), as the cluster's
// admin: a QMP command answers, the QMP log names the caller, a VNC screenshot is a PNG, a
// command typed on the serial console (a terminal) is answered by the guest's shell, a
// port-forward reaches a server in the guest. A ServiceAccount with vmlet.dev:view is refused
// QMP by RBAC and allowed once bound to vmlet.dev:admin.
func TestSubresourcesByName(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "sub", masqueradeSpec)
	vmctl := buildVmctl(t)
	admin := func(args ...string) (string, error) { return runVmctl(vmctl, cl.Kubeconfig, args...) }

	out, err := admin("qmp", b.name, "query-status")
	if err != nil {
		t.Fatalf("vmctl qmp %s query-status: %v: %s", b.name, err, out)
	}
	var st struct {
		Return struct{ Status string } `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Return.Status != "running" {
		t.Fatalf("query-status through the API: %q (%v)", out, err)
	}
	out, err = admin("qmp-log", b.name, "--tail", "5")
	if err != nil || !strings.Contains(out, "query-status") || !strings.Contains(out, "vmlet-cluster-admin") {
		t.Errorf("vmctl qmp-log: %v: %q; want the query-status by vmlet-cluster-admin", err, out)
	}
	png := filepath.Join(t.TempDir(), "screen.png")
	if out, err := admin("vnc", "screenshot", b.name, "-o", png); err != nil {
		t.Errorf("vmctl vnc screenshot: %v: %s", err, out)
	} else if img, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Errorf("screenshot %s is not a PNG (%v)", png, err)
	}

	consoleAnswers(t, vmctl, b.name)
	token := "fwd-" + suffix()
	guestShell(t, b.vmi, "nc -ll -p 8080 -e echo "+token+" </dev/null >/dev/null 2>&1 &")
	portForwardReaches(t, vmctl, b.name, token)

	sa := "sub-" + suffix()
	kubectl(t, "", "create", "serviceaccount", sa, "-n", "default")
	kubectl(t, "", "create", "rolebinding", sa+"-view", "-n", "default", "--clusterrole=vmlet.dev:view", "--serviceaccount=default:"+sa)
	kc := saKubeconfig(t, sa)
	if out, err := runVmctl(vmctl, kc, "qmp", b.name, "query-status"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("vmctl qmp as %s with vmlet.dev:view: %v: %q; want forbidden", sa, err, out)
	}
	kubectl(t, "", "create", "rolebinding", sa+"-admin", "-n", "default", "--clusterrole=vmlet.dev:admin", "--serviceaccount=default:"+sa)
	poll.Until(t, time.Minute, sa+" allowed QMP once bound to vmlet.dev:admin", func() (bool, string) {
		out, err := runVmctl(vmctl, kc, "qmp", b.name, "query-status")
		return err == nil && strings.Contains(out, "running"), fmt.Sprintf("%v: %s", err, out)
	})
	deleteVMI(t, b.name)
	assertGone(t, b.fp)
}

// TestKubectlDrain: `kubectl drain` of the node a migratable VMI (evictionStrategy
// LiveMigrate) runs on, for its launcher pod: vmlet's eviction webhook (a Service kube-proxy
// routes) refuses the eviction and has the VMI migrated to the other node; the drain then
// completes, the guest runs on there. Not parallel: the node is cordoned meanwhile.
func TestKubectlDrain(t *testing.T) {
	need(t)
	spec := strings.Replace(migratableSpec, "spec:\n", "spec:\n  evictionStrategy: LiveMigrate\n", 1)
	b := boot(t, "drain", spec)
	from := b.vmi.Status.NodeName
	t.Cleanup(func() { _, _ = cl.Kubectl(context.Background(), "uncordon", from) })
	t0 := time.Now()
	out := kubectl(t, "", "drain", from, "--pod-selector="+launcherpod.LabelVMIUID+"="+string(b.vmi.UID), "--ignore-daemonsets", "--timeout=3m")
	t.Logf("kubectl drain %s: %s", from, time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(out, "evacuation") || !strings.Contains(out, "drained") {
		t.Errorf("kubectl drain said %q; want the webhook's refusal (evacuation), then drained", out)
	}
	v := waitVMI(t, b.name, time.Minute, "running on the other node", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName != from && v.Status.NodeName != "" && conditionTrue(v, string(vmletv1.VirtualMachineInstanceReady))
	})
	if v.Status.Phase != vmletv1.Running || v.Status.MigrationState == nil || !v.Status.MigrationState.Completed || v.Status.MigrationState.SourceNode != from {
		t.Errorf("after the drain: %s, migrationState %+v", summary(v), v.Status.MigrationState)
	}
	var pods corev1.PodList
	if err := kc.List(context.Background(), &pods, client.InNamespace("default"), launcherpod.MatchingVMI(b.vmi.UID)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == from {
			t.Errorf("launcher pod %s still on the drained node %s", p.Name, from)
		}
	}
	assertGone(t, b.fp)
	kubectl(t, "", "uncordon", from)
	pod := launcherPodNamed(t, v.Status.Launcher.Pod)
	fp := nodeFootprint(t, v, pod)
	deleteVMI(t, b.name)
	assertGone(t, fp)
}

// buildVmctl builds cmd/vmctl for the test.
func buildVmctl(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vmctl")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/vmlet/vmlet/cmd/vmctl")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build vmctl: %v\n%s", err, out)
	}
	return bin
}

func runVmctl(bin, kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// saKubeconfig writes a kubeconfig for ServiceAccount sa (a token from `kubectl create token`)
// against the cluster's API server.
func saKubeconfig(t testing.TB, sa string) string {
	t.Helper()
	token := strings.TrimSpace(kubectl(t, "", "create", "token", sa, "-n", "default", "--duration=1h"))
	p := filepath.Join(t.TempDir(), sa+".kubeconfig")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, cl.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"config", "set-cluster", "c", "--server=" + cl.Config.Host, "--certificate-authority=" + ca},
		{"config", "set-credentials", sa, "--token=" + token},
		{"config", "set-context", "c", "--cluster=c", "--user=" + sa, "--namespace=default"},
		{"config", "use-context", "c"},
	} {
		cmd := exec.Command(cl.KubectlPath, append(args, "--kubeconfig="+p)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
	}
	return p
}

// consoleAnswers types a command on the VMI's serial console through `vmctl console` on a
// terminal and waits for the guest shell's answer; Ctrl-] leaves (exit 0).
func consoleAnswers(t testing.TB, vmctl, name string) {
	t.Helper()
	cmd := exec.Command(vmctl, "console", name)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig)
	testguest.ConsoleRoundTrip(t, cmd)
}

// portForwardReaches runs `vmctl port-forward` from a free local port to the guest's 8080 and
// waits until a connection there reads token (the guest's server).
func portForwardReaches(t testing.TB, vmctl, name, token string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	cmd := exec.Command(vmctl, "port-forward", name, port+":8080")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig)
	var out logbuf.Buffer // written by vmctl's output copiers while the poll reads it
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	poll.Until(t, time.Minute, "127.0.0.1:"+port+" forwarded to the guest's 8080", func() (bool, string) {
		ok, seen := answers("127.0.0.1:"+port, token)
		return ok, seen + "; vmctl: " + out.String()
	})
}
