package clustere2e_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/subresources"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
	"github.com/vmlet/vmlet/test/wsread"
)

// TestClusterSubresources: in cluster mode `vmlet controller` serves subresources.vmlet.dev
// (its CA made into a Secret and published for the agents; kube-apiserver reaches it through
// the APIService, here with its Service made an ExternalName "localhost" since the test has no
// kube-proxy) and the node agent serves the VMI streams with a self-signed certificate the
// controller pins by the Node's annotation. Users (impersonated) bound to config/rbac's roles:
// view gets 403 on the console; edit types into the guest's shell over the console and
// port-forwards to a guest port from the launcher pod's network; admin runs QMP and its QMP log
// names the caller.
func TestClusterSubresources(t *testing.T) {
	prereq.Root(t) // before env is used: it is nil where TestMain started no API server (-short)
	prereq.QEMU(t)
	ctx := context.Background()
	cl := env.Client
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: subresources.ServiceNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	c := startClusterWith(t, clusterOptions{subresources: addr})
	if out, err := env.Kubectl("apply", "-f", filepath.Join(apienv.RepoRoot(), "config", "rbac", "subresources_roles.yaml")); err != nil {
		t.Fatalf("apply roles: %v: %s", err, out)
	}
	for user, role := range map[string]string{"cl-view": "vmlet.dev:view", "cl-edit": "vmlet.dev:edit", "cl-admin": "vmlet.dev:admin"} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		if err := cl.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	vmi := guestvmi.VMI("subres", guestImage)
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), vmi) })
	key := client.ObjectKeyFromObject(vmi)
	c.waitVMI(t, key, 3*time.Minute, "Ready with an address and its guest agent connected", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) && len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != "" &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	runDir := launcherpod.HostRunDir(c.launcherRoot, vmi.UID)
	poll.Until(t, 2*time.Minute, "guest ready and the node's streams published", func() (bool, string) {
		n := &corev1.Node{}
		_ = cl.Get(ctx, client.ObjectKey{Name: nodeName}, n)
		b, _ := readFile(filepath.Join(runDir, "logs", "serial.log"))
		return strings.Contains(b, testguest.MarkerReady) && n.Annotations[controllers.AnnotStreamsCertSHA256] != "", poll.Tail(b, 500)
	})
	// No kube-proxy here: point the APIService's Service at the controller's port on localhost.
	sec := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: subresources.ServiceNamespace, Name: subresources.CAName}, sec); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	if err := subresources.RegisterLocal(ctx, cl, sec.Data[corev1.TLSCertKey], int32(p)); err != nil {
		t.Fatal(err)
	}

	do := func(user, method, sub, body string) (int, string) {
		t.Helper()
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(cfg.Host, "/")+subPath(sub), strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ws := func(user, sub string) (*websocket.Conn, int) {
		t.Helper()
		tc, err := rest.TLSConfigFor(env.Config)
		if err != nil {
			t.Fatal(err)
		}
		d := websocket.Dialer{TLSClientConfig: tc, Subprotocols: []string{"plain.kubevirt.io"}, HandshakeTimeout: 30 * time.Second}
		conn, resp, err := d.Dial("wss://"+strings.TrimPrefix(strings.TrimSuffix(env.Config.Host, "/"), "https://")+subPath(sub), http.Header{"Impersonate-User": {user}})
		if resp != nil {
			defer resp.Body.Close()
		}
		if err != nil {
			if resp != nil {
				b, _ := io.ReadAll(resp.Body)
				t.Logf("websocket %s as %s: %d %s", sub, user, resp.StatusCode, b)
				return nil, resp.StatusCode
			}
			t.Fatalf("websocket %s: %v", sub, err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, http.StatusSwitchingProtocols
	}
	poll.Until(t, time.Minute, "qmp through the aggregated API", func() (bool, string) {
		code, body := do("cl-admin", http.MethodPost, "qmp", `{"execute":"query-status"}`)
		return code == http.StatusOK && strings.Contains(body, `"running"`), body
	})
	if _, code := ws("cl-view", "console"); code != http.StatusForbidden {
		t.Errorf("console as view: %d, want 403", code)
	}
	if code, body := do("cl-edit", http.MethodPost, "qmp", `{"execute":"query-status"}`); code != http.StatusForbidden {
		t.Errorf("qmp as edit: %d %s, want 403", code, body)
	}
	con, code := ws("cl-edit", "console")
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("console as edit: %d", code)
	}
	if err := con.WriteMessage(websocket.BinaryMessage, []byte("echo cluster-$((40+2))\n")); err != nil {
		t.Fatal(err)
	}
	wsReadUntil(t, con, "cluster-42")
	con.Close()

	// Port-forward from the launcher pod's network to a guest port.
	lc, err := launcher.Dial(ctx, filepath.Join(runDir, "launcher.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if r, err := lc.GuestExec(ctx, "/bin/sh", []string{"-c", "ip link set lo up; nc -ll -p 7778 -e echo cluster-forward </dev/null >/dev/null 2>&1 &"}, nil, 20*time.Second); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("start the guest's listener: %v %v", err, r)
	}
	poll.Until(t, time.Minute, "port-forward 7778 reads cluster-forward", func() (bool, string) {
		pf, code := ws("cl-edit", "portforward/7778")
		if code != http.StatusSwitchingProtocols {
			return false, http.StatusText(code)
		}
		defer pf.Close()
		got, err := wsread.Until(pf, "cluster-forward", 10*time.Second)
		return err == nil, got
	})
	if code, body := do("cl-admin", http.MethodGet, "qmplog?tail=200", ""); code != http.StatusOK || !strings.Contains(body, `"caller":"cl-admin"`) {
		t.Errorf("qmplog as admin: %d %s, want entries with caller cl-admin", code, poll.Tail(body, 2000))
	}
}

func subPath(sub string) string {
	return "/apis/subresources.vmlet.dev/v1alpha1/namespaces/default/virtualmachineinstances/subres/" + sub
}

func wsReadUntil(t *testing.T, c *websocket.Conn, want string) {
	t.Helper()
	if got, err := wsread.Until(c, want, time.Minute); err != nil {
		t.Fatalf("%v; got %q", err, poll.Tail(got, 2000))
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
